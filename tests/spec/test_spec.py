"""The spec language: serialisation, validation errors, overrides, spec files. No torch needed."""

import json
import re
import subprocess
import sys
import typing
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.breakages import apply_changes, invalid_deletions, invalid_overrides, invalid_specs
from tests.helpers.strategies import valid_models
from vspec.spec import (
    KINDS,
    MHSA,
    MLP,
    ROLES,
    VERSION,
    Block,
    ClassTokenHead,
    GAPHead,
    Model,
    Norm,
    PatchEmbed,
    Projections,
    SimplePatchEmbed,
    SpecError,
    from_dict,
    from_json,
    from_toml,
    load_spec,
    override,
    parse_assignment,
    to_dict,
    to_json,
    to_toml,
)

ROOT = Path(__file__).resolve().parents[2]
PATH_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*: ")


def small_spec(**changes):
    """A tiny valid spec: 16 px, 8 px patches, 2 x 32 wide, 4 heads."""
    base = dict(embedder=PatchEmbed(patch_size=8), block=Block(attention=MHSA(heads=4)), depth=2, dim=32,
                num_classes=10, img_size=16)
    return Model(**{**base, **changes})


def assert_spec_error(err: SpecError, path: str) -> None:
    assert isinstance(err, SpecError)
    assert err.path == path, f"expected path {path!r}, got {err.path!r} ({err})"
    assert str(err).startswith(f"{path}: "), str(err)
    assert PATH_PREFIX.match(str(err)), str(err)
    assert err.message and str(err) == f"{path}: {err.message}"


# ---------------------------------------------------------------------------------------------
# (a) round trips


@given(valid_models())
def test_json_round_trip(spec):
    text = to_json(spec)
    assert from_json(text) == spec
    assert from_json(to_json(spec, indent=None)) == spec
    assert json.loads(text) == to_dict(spec)


@given(valid_models())
def test_toml_round_trip(spec):
    text = to_toml(spec)
    assert "null" not in text.lower().split()  # TOML has no null: None fields are left out
    assert from_toml(text) == spec


@given(valid_models())
def test_dict_round_trip_and_kind_tags(spec):
    data = to_dict(spec)
    assert from_dict(data) == spec
    assert data["embedder"]["kind"] == spec.embedder.kind
    assert data["head"]["kind"] == spec.head.kind
    stages = data["stages"] if "stages" in data else [data]  # one stage: block / depth / dim at the root
    assert ("stages" in data) == (len(spec.stages) > 1) and data["version"] == VERSION
    blocks = [b for s in stages for b in (s["block"] if isinstance(s["block"], list) else [s["block"]])]
    assert all(b["attention"]["kind"] in ("mhsa", "window_mhsa") and b["ffn"]["kind"] == "mlp" for b in blocks)
    assert all((s.get("entry") or {"kind": "patch_merging"})["kind"] == "patch_merging" for s in stages)
    assert isinstance(data["img_size"], list) and len(data["img_size"]) == 2


def test_round_trip_of_presets_and_shorthands():
    spec = small_spec(block=(Block(attention=MHSA(heads=4), layer_scale=0.1), Block(attention=MHSA(heads=2))))
    assert from_json(to_json(spec)) == spec
    assert from_toml(to_toml(spec)) == spec
    # int shorthand for img_size, int for a float field
    data = {**to_dict(small_spec()), "img_size": 16, "drop_path": 0}
    s = from_dict(data)
    assert s.img_size == (16, 16) and s.drop_path == 0.0 and isinstance(s.drop_path, float)


def test_json_and_toml_syntax_errors_are_spec_errors():
    with pytest.raises(SpecError, match="invalid JSON"):
        from_json("{not json")
    with pytest.raises(SpecError, match="invalid TOML"):
        from_toml("depth = = 3")


# ---------------------------------------------------------------------------------------------
# (b) invalid specs


@given(invalid_specs())
def test_invalid_dicts_raise_spec_error_naming_the_field(case):
    data, path = case
    with pytest.raises(SpecError) as info:
        from_dict(data)
    assert_spec_error(info.value, path)


@settings(max_examples=15)
@given(invalid_specs())
def test_invalid_json_raises_spec_error_naming_the_field(case):
    data, path = case
    with pytest.raises(SpecError) as info:
        from_json(json.dumps(data))
    assert_spec_error(info.value, path)


@settings(max_examples=10)
@given(invalid_deletions())
def test_missing_kind_tag(case):
    data, path = case
    with pytest.raises(SpecError) as info:
        from_dict(data)
    assert_spec_error(info.value, path)


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ([("block.attention.heads", 5)], "block.attention.heads"),  # does not divide 32
        ([("block.attention.heads", 0)], "block.attention.heads"),
        ([("block.attention.heads", "4")], "block.attention.heads"),
        ([("embedder.patch_size", 5)], "embedder.patch_size"),  # does not divide 16
        ([("img_size", [16, 20])], "embedder.patch_size"),
        ([("class_token", False)], "head"),  # class-token head without a class token
        ([("block.ffn.ratio", 0.0)], "block.ffn.ratio"),
        ([("block.ffn.ratio", True)], "block.ffn.ratio"),
        ([("head.kind", "attention_pool")], "head.kind"),
        ([("embedder.kind", "conv")], "embedder.kind"),
        ([("block.attention.kind", "linear")], "block.attention.kind"),
        ([("depth", 3), ("block", [to_dict(Block(attention=MHSA(heads=4)))] * 2)], "depth"),
        ([("depth", "2")], "depth"),
        ([("drop_path", True)], "drop_path"),
        ([("pos_embed", "rope")], "pos_embed"),
        ([("dim", 30), ("pos_embed", "sincos2d"), ("block.attention.heads", 3)], "pos_embed"),
        ([("dim", 33), ("pos_embed", "sincos1d"), ("block.attention.heads", 3)], "pos_embed"),
        ([("unknown", 1)], "unknown"),
        ([("block.norm.bias", True)], "block.norm.bias"),
        ([("img_size", [16, 0])], "img_size"),
        ([("img_size", [16, "16"])], "img_size.1"),
        ([("head", {"kind": "gap", "norm": {"eps": 0}})], "head.norm.eps"),
        ([("head", {"kind": "gap", "norm": {"kind": "rmsnorm"}})], "head.norm.kind"),
        ([("embedder", {"kind": "simple_patch", "patch_size": 8, "bias": True})], "embedder.bias"),
    ],
)
def test_named_breakages(changes, path):
    data = apply_changes(to_dict(small_spec()), changes)
    with pytest.raises(SpecError) as info:
        from_dict(data)
    assert_spec_error(info.value, path)


def test_list_block_errors_name_the_index():
    blocks = [to_dict(Block(attention=MHSA(heads=4)))] * 3
    data = {**to_dict(small_spec()), "block": blocks, "depth": 3}
    assert from_dict(data).depth == 3
    data = apply_changes(data, [("block.2.attention.heads", 5)])
    with pytest.raises(SpecError) as info:
        from_dict(data)
    assert_spec_error(info.value, "block.2.attention.heads")
    data = apply_changes(data, [("block.2.attention.heads", 4), ("block.1", 7)])
    with pytest.raises(SpecError) as info:
        from_dict(data)
    assert_spec_error(info.value, "block.1")


def test_direct_construction_errors_name_the_class_field():
    with pytest.raises(SpecError) as info:
        MHSA(heads=0)
    assert_spec_error(info.value, "MHSA.heads")
    with pytest.raises(SpecError) as info:
        MLP(ratio=True)
    assert_spec_error(info.value, "MLP.ratio")
    with pytest.raises(SpecError) as info:
        Model(depth="3")
    assert_spec_error(info.value, "Model.depth")
    with pytest.raises(SpecError) as info:
        Model(head=Norm())
    assert_spec_error(info.value, "Model.head")
    with pytest.raises(SpecError) as info:
        Model(block=[Block(), 1], depth=2)
    assert_spec_error(info.value, "Model.block.1")
    with pytest.raises(SpecError) as info:  # cross-field rules: paths from the model root
        Model(dim=100, block=Block(attention=MHSA(heads=3)))
    assert_spec_error(info.value, "block.attention.heads")
    with pytest.raises(SpecError) as info:
        Model(class_token=False)
    assert_spec_error(info.value, "head")
    # explicit head_dim lifts the divisibility rule
    assert Model(dim=100, block=Block(attention=MHSA(heads=3, head_dim=32))).blocks[0].attention.heads == 3


def test_from_dict_of_non_mapping():
    for bad in ([1], "model", 3, None):
        with pytest.raises(SpecError):
            from_dict(bad)


# ---------------------------------------------------------------------------------------------
# (c) overrides and parse_assignment


def test_override_dotted_keys():
    spec = small_spec()
    out = override(spec, {"block.attention.heads": 8, "depth": 3, "img_size": [16, 32], "drop_path": 0.1})
    assert out.blocks[0].attention.heads == 8
    assert out.depth == 3 and out.img_size == (16, 32) and out.drop_path == 0.1
    assert spec == small_spec()  # the input is unchanged
    assert override(spec, {}) == spec


def test_override_switch_head_kind_and_set_nested_none_field():
    spec = small_spec(head=ClassTokenHead(drop=0.25))
    out = override(spec, {"head.kind": "gap", "head.norm.eps": 1e-5})
    assert out.head == GAPHead(norm=Norm(eps=1e-5), drop=0.25)  # shared field `drop` is kept
    back = override(out, {"head.kind": "class_token"})
    assert back.head == ClassTokenHead(drop=0.25)
    # head.norm does not exist on the class-token head
    with pytest.raises(SpecError) as info:
        override(spec, {"head.norm.eps": 1e-5})
    assert_spec_error(info.value, "head.norm")
    # a string into an unset component (it used to raise KeyError: a traceback from the CLI)
    assert override(spec, {"head.kind": "gap", "head.norm.kind": "batchnorm"}).head.norm == Norm(kind="batchnorm")
    tied = override(small_spec(), {"block.attention.projections.roles": "QKKW"})
    assert tied.block.attention.projections == Projections(roles="QKKW")


def test_override_switch_embedder_kind_keeps_shared_fields():
    out = override(small_spec(), {"embedder.kind": "simple_patch"})
    assert out.embedder == SimplePatchEmbed(patch_size=8)
    out = override(out, {"embedder.kind": "patch", "embedder.bias": False})
    assert out.embedder == PatchEmbed(patch_size=8, bias=False, norm=Norm(eps=1e-5))  # both kinds have a norm
    out = override(out, {"embedder.norm": None})
    assert out.embedder == PatchEmbed(patch_size=8, bias=False)


def test_override_list_indexed_blocks():
    spec = small_spec(block=(Block(attention=MHSA(heads=4)), Block(attention=MHSA(heads=2))))
    out = override(spec, {"block.1.attention.heads": 8, "block.0.layer_scale": 1e-4})
    assert out.block[1].attention.heads == 8 and out.block[0].attention.heads == 4
    assert out.block[0].layer_scale == 1e-4 and out.block[1].layer_scale is None
    with pytest.raises(SpecError) as info:
        override(spec, {"block.2.attention.heads": 8})
    assert_spec_error(info.value, "block.2")
    with pytest.raises(SpecError) as info:
        override(spec, {"block.1.attention.heads": 5})
    assert_spec_error(info.value, "block.1.attention.heads")
    with pytest.raises(SpecError) as info:  # a repeated block has no index
        override(small_spec(), {"block.1.attention.heads": 8})
    assert_spec_error(info.value, "block.1")


@pytest.mark.parametrize(
    ("assignments", "path"),
    [
        ({"block.attention.heads": "6"}, "block.attention.heads"),
        ({"depth": 2.0}, "depth"),
        ({"class_token": "true"}, "class_token"),
        ({"block.ffn.ratio": False}, "block.ffn.ratio"),
        ({"block.attention.heads": 5}, "block.attention.heads"),
        ({"block.attention.window": 7}, "block.attention.window"),
        ({"head.kind": "gap", "head.pool": "avg"}, "head.pool"),
        ({"head.kind": "nope"}, "head.kind"),
        ({"depth.x": 1}, "depth"),
    ],
)
def test_override_errors(assignments, path):
    with pytest.raises(SpecError) as info:
        override(small_spec(), assignments)
    assert_spec_error(info.value, path)


@given(invalid_overrides())
def test_random_invalid_overrides(case):
    spec, assignments, path = case
    with pytest.raises(SpecError) as info:
        override(spec, assignments)
    assert_spec_error(info.value, path)


@given(valid_models(), st.data())
def test_override_with_own_values_is_identity(spec, data):
    flat = {}

    def walk(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                if k != "kind":
                    walk(f"{prefix}.{k}" if prefix else k, v)
        elif isinstance(value, list) and prefix == "block":
            for i, v in enumerate(value):
                walk(f"{prefix}.{i}", v)
        else:
            flat[prefix] = value

    walk("", to_dict(spec))
    assert flat.pop("version") == VERSION  # the format, not a field: no override sets it
    keys = data.draw(st.lists(st.sampled_from(sorted(flat)), min_size=1, max_size=5, unique=True))
    assert override(spec, {k: flat[k] for k in keys}) == spec
    with pytest.raises(SpecError, match="^version: unknown key"):
        override(spec, {"version": VERSION})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("block.attention.heads=6", ("block.attention.heads", 6)),
        ("class_token=true", ("class_token", True)),
        ("class_token=True", ("class_token", True)),
        ("final_norm=false", ("final_norm", False)),
        ("head.norm=null", ("head.norm", None)),
        ("head.norm=None", ("head.norm", None)),
        ("head.kind=gap", ("head.kind", "gap")),
        ('init="torch"', ("init", "torch")),
        ("init='torch'", ("init", "torch")),
        ("img_size=[16, 32]", ("img_size", [16, 32])),
        ("drop_path=0.1", ("drop_path", 0.1)),
        ("block.norm.eps=1e-5", ("block.norm.eps", 1e-5)),
        (" depth = 3 ", ("depth", 3)),
        ('head={"kind": "gap"}', ("head", {"kind": "gap"})),
        ("name=a=b", ("name", "a=b")),
        ("heads=6 heads", ("heads", "6 heads")),
    ],
)
def test_parse_assignment(text, expected):
    got = parse_assignment(text)
    assert got == expected
    assert type(got[1]) is type(expected[1])


@pytest.mark.parametrize("text", ["depth", "=3", " =3", ""])
def test_parse_assignment_errors(text):
    with pytest.raises(SpecError):
        parse_assignment(text)


def test_parse_assignment_feeds_override():
    spec = override(small_spec(), dict(map(parse_assignment, ["head.kind=gap", "head.norm.eps=1e-5",
                                                              "block.attention.heads=8", "img_size=[16, 32]"])))
    assert spec.head == GAPHead(norm=Norm(eps=1e-5))
    assert spec.blocks[0].attention.heads == 8 and spec.img_size == (16, 32)


# ---------------------------------------------------------------------------------------------
# (d) optional fields default to None


def _spec_classes() -> set[type]:
    seen: set[type] = set()
    todo = [Block, Model, Norm, *(c for classes in ROLES.values() for c in classes)]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        attrs.resolve_types(cls)
        for f in attrs.fields(cls):
            stack = [f.type]
            while stack:
                t = stack.pop()
                if attrs.has(t):
                    todo.append(t)
                stack.extend(typing.get_args(t))
    return seen


def test_optional_fields_default_to_none():
    classes = _spec_classes()
    assert {Block, Model, Norm, MHSA, MLP, PatchEmbed, SimplePatchEmbed, ClassTokenHead, GAPHead} <= classes
    assert set(KINDS.values()) <= classes
    optional = []
    for cls in classes:
        for f in attrs.fields(cls):
            if type(None) in typing.get_args(f.type):
                optional.append(f"{cls.__name__}.{f.name}")
                assert f.default is None, f"{cls.__name__}.{f.name} admits None but defaults to {f.default!r}"
    # the ones we know of are seen (the check is not vacuous)
    assert {"MHSA.head_dim", "MHSA.scale", "MLP.hidden", "GAPHead.norm", "Block.layer_scale"} <= set(optional)


def test_every_kind_is_registered_once():
    classes = [c for role in ROLES.values() for c in role]
    assert len(KINDS) == len(classes) == len(set(classes))  # kinds are unique across roles
    assert all(KINDS[c.kind] is c for c in classes)
    assert {"patch": PatchEmbed, "simple_patch": SimplePatchEmbed, "mhsa": MHSA, "mlp": MLP,
            "class_token": ClassTokenHead, "gap": GAPHead}.items() <= KINDS.items()
    assert not set(KINDS) & {"layernorm", "none"}  # Norm.kind values are no component kinds


# ---------------------------------------------------------------------------------------------
# (e) the spec language does not import torch


@pytest.mark.parametrize(
    "code",
    [
        "import vspec.spec, sys; assert 'torch' not in sys.modules, 'torch imported'",
        "import vspec, sys; vspec.load_spec('specs/deit_tiny.py'); assert 'torch' not in sys.modules, 'torch imported'",
        "import vspec, sys; vspec.from_json(vspec.to_json(vspec.load_spec('specs/simplevit_s.py'))); "
        "vspec.override(vspec.Model(), {'head.kind': 'gap'}); assert 'torch' not in sys.modules, 'torch imported'",
    ],
)
def test_spec_language_is_torch_free(code):
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr

    # the check itself works: importing the compiler does import torch
    if code.startswith("import vspec.spec"):
        proc = subprocess.run([sys.executable, "-c", code.replace("import vspec.spec", "import vspec.compiler")],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and "torch imported" in proc.stderr


def test_the_families_kinds_are_served_not_written_into_vspec_spec():
    """vspec.spec's own names are static imports in a sorted `__all__`; each family's kinds (its spec module's
    `__all__`) resolve as `vspec.spec.<Name>` and `vspec.<Name>` and are listed by dir(), but are never written
    into the package's globals (issue 62: no rewrite of `globals()` at import)."""
    import importlib

    import vspec
    import vspec.spec as package

    family_names = {}
    for module in (importlib.import_module(f"vspec.models.{f}.spec") for f in ("sot", "t2t", "refiner", "dhvt")):
        family_names.update({name: getattr(module, name) for name in module.__all__})
    assert "SecondOrderHead" in family_names and "T2TEmbed" in family_names
    assert package.__all__ == sorted(package.__all__) and not set(family_names) & set(package.__all__)
    assert not set(family_names) & set(vars(package)) and not set(family_names) & set(vars(vspec))
    for name, obj in family_names.items():
        assert getattr(package, name) is obj and getattr(vspec, name) is obj, name
        assert name in dir(package) and name in dir(vspec), name


# ---------------------------------------------------------------------------------------------
# (f) load_spec


def test_load_spec_py_json_toml(tmp_path):
    spec = small_spec(head=GAPHead(norm=Norm(eps=1e-5)), class_token=False, pos_embed="sincos2d")
    (tmp_path / "s.json").write_text(to_json(spec))
    (tmp_path / "s.toml").write_text(to_toml(spec))
    (tmp_path / "s.py").write_text(
        "from vspec.spec import MHSA, Block, GAPHead, Model, Norm, PatchEmbed\n"
        "SPEC = Model(embedder=PatchEmbed(patch_size=8), block=Block(attention=MHSA(heads=4)), depth=2, dim=32,\n"
        "             num_classes=10, img_size=16, head=GAPHead(norm=Norm(eps=1e-5)), class_token=False,\n"
        "             pos_embed='sincos2d')\n")
    for name in ("s.json", "s.toml", "s.py"):
        assert load_spec(tmp_path / name) == spec
        assert load_spec(str(tmp_path / name)) == spec


def test_load_spec_presets():
    for path in sorted((ROOT / "specs").glob("*.py")):
        assert isinstance(load_spec(path), Model)
    assert load_spec(ROOT / "specs" / "deit_tiny.py").dim == 192


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("missing.json", None, "no such file"),
        ("missing.py", None, "no such file"),
        ("spec.yaml", "depth: 3\n", "unsupported"),
        ("spec", "{}", "unsupported"),
        ("nospec.py", "X = 1\n", "SPEC"),
        ("wrongspec.py", "SPEC = {'depth': 3}\n", "SPEC"),
        ("bad.json", "{", "invalid JSON"),
        ("bad.toml", "depth =", "invalid TOML"),
    ],
)
def test_load_spec_errors(tmp_path, name, content, match):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(SpecError, match=match):
        load_spec(path)


def test_load_spec_invalid_content_names_the_field(tmp_path):
    data = apply_changes(to_dict(small_spec()), [("block.attention.heads", 5)])
    (tmp_path / "s.json").write_text(json.dumps(data))
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "s.json")
    assert_spec_error(info.value, "block.attention.heads")
    (tmp_path / "s.toml").write_text("depth = 0\n")
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "s.toml")
    assert_spec_error(info.value, "depth")


# ---------------------------------------------------------------------------------------------
# regressions: bugs found by the Hypothesis suite


def test_regression_unhashable_kind_in_dict_is_spec_error():
    data = {**to_dict(small_spec()), "head": {"kind": ["gap"]}}
    with pytest.raises(SpecError) as info:
        from_dict(data)
    assert_spec_error(info.value, "head.kind")


def test_regression_unhashable_kind_in_override_is_spec_error():
    with pytest.raises(SpecError) as info:
        override(small_spec(), {"head.kind": ["gap"]})
    assert_spec_error(info.value, "head.kind")


def test_regression_norm_kind_override_names_norm_kind():
    with pytest.raises(SpecError) as info:
        override(small_spec(), {"block.norm.kind": "mlp"})
    assert_spec_error(info.value, "block.norm.kind")


def test_regression_infinite_ratio_is_spec_error():
    text = json.dumps(apply_changes(to_dict(small_spec()), [("block.ffn.ratio", float("inf"))]))
    assert "Infinity" in text
    with pytest.raises(SpecError) as info:
        from_json(text)
    assert_spec_error(info.value, "block.ffn.ratio")


def test_regression_ffn_width_below_one_is_spec_error():
    with pytest.raises(SpecError) as info:
        override(small_spec(), {"block.ffn.ratio": 0.01})
    assert_spec_error(info.value, "block.ffn.ratio")


def test_regression_python_tuple_of_blocks_in_from_dict():
    spec = small_spec()
    data = {**to_dict(spec), "block": tuple(to_dict(spec.block) for _ in range(spec.depth))}
    assert from_dict(data).blocks == spec.blocks


def test_regression_empty_override_key_is_named():
    with pytest.raises(SpecError, match="override key '' must be a dotted field path"):
        override(small_spec(), {"": 3})


def test_one_helper_shortens_a_value_or_an_exception_for_a_message():
    """`cut` is the one place a message is shortened, in the three marks its callers print (written out here as
    the messages show them): a value's length, an error line's characters left out, a cause cut to fit."""
    from vspec.spec.errors import cause, cut, one_line, show, text_of

    assert cut("x" * 80) == "x" * 80 and cut("x" * 100) == "x" * 77 + "... (100 characters)"
    assert show("y" * 100) == "'" + "y" * 76 + "... (102 characters)"
    assert cut("z" * 2000, 500, "more") == "z" * 500 + "... [1,500 more characters]"
    assert cut("w" * 50, 40, "fit") == "w" * 37 + "..." and cut("w" * 40, 40, "fit") == "w" * 40

    class Hostile(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert text_of(Hostile()) == "Hostile" == one_line(Hostile()) and text_of(ValueError("a")) == "a"
    assert cause(ValueError("v" * 200), 20) == "ValueError: vvvvv..."
