"""The role protocol (vspec/spec/kinds.py): a kind declares its capabilities once on its role's base, defining
it registers it, a misspelt capability is refused, and no code probes a capability with a default."""

import re
from pathlib import Path
from typing import ClassVar

import pytest
from attrs import field, frozen

import vspec
from vspec.spec import KINDS, MHSA, ROLES, Model, SpecError, WindowMHSA
from vspec.spec.errors import check
from vspec.spec.kinds import ROLE_BASES, AttentionKind, FFNKind, unregister

CAPABILITIES = ("attends_all", "reads", "writes", "variant", "check_before_head", "reads_prefix", "pad_id",
                "refines_maps", "no_weight_decay_names", "masks", "causal", "dense")


def test_a_misspelt_capability_is_refused():
    with pytest.raises(TypeError, match=r"Typo\.attend_all: not a capability of the attention role \(it has: "
                                        r"any_grid, attends_all, causal, masks, needs_grid\)"):
        @frozen
        class Typo(AttentionKind):
            kind: ClassVar[str] = "typo"
            attend_all: ClassVar[bool] = True
    assert "typo" not in KINDS


def test_a_kind_needs_a_role_and_its_own_tag():
    with pytest.raises(TypeError, match="non-empty str kind"):
        @frozen
        class Empty(FFNKind):
            kind: ClassVar[str] = ""
    with pytest.raises(TypeError, match=r"kind 'mhsa' is vspec\.spec\.vit\.MHSA's already"):
        @frozen
        class Twin(AttentionKind):
            kind: ClassVar[str] = "mhsa"
    assert KINDS["mhsa"] is MHSA


def _define():
    @frozen
    class Shuffle(FFNKind):
        """A test's FFN kind: no parameters."""

        kind: ClassVar[str] = "test_shuffle"
        times: int = field(default=1, validator=check(int, ge=1))

    return Shuffle


def test_defining_a_kind_registers_it_and_files_know_it():
    cls = _define()
    try:
        assert _define() is not cls and KINDS["test_shuffle"].__qualname__ == cls.__qualname__  # redefined: replaced
        cls = KINDS["test_shuffle"]
        assert ROLES["ffn"].count(cls) == 1 and ROLES["ffn"][-1] is cls
        spec = Model(depth=1, dim=16, img_size=32, block=vspec.spec.Block(attention=MHSA(heads=2), ffn=cls(times=2)))
        text = vspec.to_json(spec)
        assert '"kind": "test_shuffle"' in text and vspec.from_json(text) == spec
    finally:
        unregister(cls)
    assert "test_shuffle" not in KINDS and cls not in ROLES["ffn"]
    with pytest.raises(SpecError, match=r"block\.ffn\.kind: unknown kind 'test_shuffle'; allowed: mlp, daff"):
        vspec.from_json(text)


def test_masks_are_declared_capabilities():
    MHSA().check_masks(padding=True, causal=True)
    with pytest.raises(SpecError, match="window_mhsa attention cannot honour a key-padding mask"):
        WindowMHSA().check_masks(padding=True, causal=False)
    assert {c.kind for c in ROLES["attention"] if c.masks} >= {"mhsa"}


def test_every_role_has_one_base_and_no_code_probes_a_capability():
    assert set(ROLES) == set(ROLE_BASES)
    probe = re.compile(r"getattr\([^)]*['\"](" + "|".join(CAPABILITIES) + r")['\"]")
    found = [f"{p}:{i}" for p in sorted(Path(vspec.__file__).parent.rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if probe.search(line)]
    assert found == [], "a capability read with a getattr default instead of declared on its role's base"
