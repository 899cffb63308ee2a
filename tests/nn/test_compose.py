"""Random compositions of every component kind (ViT, SoT, DHVT, Swin parts) on one-stage and
hierarchical bodies: each builds, runs, back-propagates a nonzero gradient to every parameter,
round-trips through JSON and TOML, and profiles with every op counted. What cannot compose is
rejected at spec time with a SpecError naming the field."""

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import vspec
from tests.helpers import ROOT
from tests.helpers.checks import assert_every_parameter_learns
from tests.helpers.compose import (
    NORMS,  # noqa: F401
    composed_models,  # noqa: F401
)
from vspec.nn.head_outputs import as_outputs
from vspec.spec import (
    Model,
    SpecError,
)


def composed(fields: dict, single_token: str | None) -> Model | None:
    """The model, or None when the spec refuses it as it must: attention over one token (naming the
    attention, or the nonlocal embedder), a second-order pool over one token (tests/models/sot/test_sot.py), a DAFF
    re-weighting the class token for a head that never reads it (tests/models/dhvt/test_dhvt.py)."""
    try:
        spec = Model(**fields)
    except SpecError as e:
        if single_token is not None:
            assert e.path == single_token, str(e)
            return None
        assume(e.path not in ("head.pool", "block.ffn.cls"))
        raise
    assert single_token is None, f"accepted with 1 token to attend at {single_token}"
    return spec


@settings(max_examples=30)
@given(case=composed_models(), seed=st.integers(0, 1000))
def test_any_composition_builds_trains_and_profiles(case, seed):
    spec = composed(*case)
    if spec is None:  # refused, naming the attention over one token
        return
    assert vspec.from_json(vspec.to_json(spec)) == spec
    assert vspec.from_toml(vspec.to_toml(spec)) == spec
    torch.manual_seed(seed)
    model = vspec.build(spec).train().set_training_outputs(True)
    outs = as_outputs(model(torch.randn(2, 3, *spec.img_size)))
    assert [(o.name, o.target, o.weight) for o in outs] == list(spec.head.outputs())  # the declared outputs
    n = model.layout[-1].tokens.patches
    assert all(o.logits.shape == ((2, n, 3) if o.target == "tokens" else (2, 3)) for o in outs)
    assert all(torch.isfinite(o.logits).all() for o in outs)
    model.eval().double()  # the gradient check in float64, with nothing stochastic that could hide a parameter
    model.zero_grad(set_to_none=True)
    out = model(torch.randn(4, 3, *spec.img_size, dtype=torch.float64))
    (out * torch.randn_like(out)).sum().backward()
    assert_every_parameter_learns(model)
    with torch.no_grad():
        assert model(torch.randn(1, 3, *spec.img_size, dtype=torch.float64)).shape == (1, 3)
    prof = vspec.profile(spec)
    assert prof.params == sum(p.numel() for p in model.parameters())
    assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs


SWIN = vspec.load_spec(ROOT / "specs" / "swin_tiny.py")


@pytest.mark.parametrize("changes,path,needle", [
    ({"class_token": True}, "stages.0.block.attention", "class token has no place"),
    ({"class_token": True, **{f"stages.{i}.block.attention.kind": "mhsa" for i in range(4)}}, "stages.1.entry",
     "class token cannot pass through"),
    ({"head.kind": "class_token"}, "head", "needs class_token = true"),
    ({"head.kind": "second_order"}, "head", "z0 = mean_token"),
    ({"stages.1.block.ffn.kind": "daff"}, "stages.1.block.ffn.cls", "has none"),
    ({"stages.1.block.kind": "head_tokens"}, "stages.1.block.head_tokens", "windows of the grid"),
    ({"stages.0.entry": {"kind": "patch_merging"}}, "stages.0.entry", "first stage"),
    ({"stages.2.entry": None}, "stages.2.dim", "no entry"),
    ({"stages.2.block.attention.window": 5}, "stages.2.block.attention.window", "does not divide"),
    ({"img_size": 112}, "stages.3.entry", "even token grid"),
    ({"depth": 12}, "depth", "4 stages"),
])
def test_what_cannot_compose_is_rejected_naming_the_field(changes, path, needle):
    with pytest.raises(SpecError) as info:
        vspec.override(SWIN, changes)
    assert info.value.path == path and needle in info.value.message, str(info.value)


def test_sot_head_on_swin_with_the_mean_token():
    """SoT's head on Swin-T (no class token): z0 = the mean word token; it trains one step."""
    spec = vspec.override(SWIN, {"head.kind": "second_order", "head.z0": "mean_token", "img_size": 64,
                                 **{f"stages.{i}.block.attention.window": 2 for i in range(4)}})
    torch.manual_seed(0)
    model = vspec.build(spec).train().set_training_outputs(True)
    x, y = torch.randn(2, 3, 64, 64), torch.tensor([1, 7])
    words = model.forward_features(x)
    assert torch.allclose(model.head.first_order(words), words.mean(dim=1))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    assert_every_parameter_learns(model)
