"""Ways to break a valid spec (tests/helpers/strategies.py draws them): `breakages(spec)` draws one, a sequence of
dotted assignments (or key deletions) plus the field path the resulting SpecError must name. `invalid_specs()`
applies a breakage to `to_dict(spec)` (feed the result to `from_dict`); `invalid_overrides()` gives the same
breakages as `override()` arguments; `apply_changes` applies changes to an unstructured spec."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.helpers.strategies import valid_models
from vspec.spec import GAPHead, Model, PatchEmbed, WindowMHSA, to_dict

DELETE = object()  # a breakage value meaning "remove this key"


def set_path(tree: Any, dotted: str, value: Any) -> None:
    """Set (or with DELETE, remove) `dotted` in an unstructured spec, in place."""
    *parents, last = dotted.split(".")
    node = tree
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    elif value is DELETE:
        del node[last]
    else:
        node[last] = value


def unshared_copy(value: Any) -> Any:
    """A deep copy in which no two places share an object (deepcopy keeps `[d] * 2` aliased)."""
    if isinstance(value, dict):
        return {k: unshared_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [unshared_copy(v) for v in value]
    return value


def apply_changes(data: dict[str, Any], changes: list[tuple[str, Any]]) -> dict[str, Any]:
    data = unshared_copy(data)
    for dotted, value in changes:
        set_path(data, dotted, unshared_copy(value))
    return data


@st.composite
def breakages(draw, spec: Model) -> tuple[list[tuple[str, Any]], str]:
    """One way to break `spec`: (changes, expected error path). Each change is (dotted key, value).
    A one-stage model's stage fields sit at the root (block, depth, dim), a hierarchical one's under
    `stages.s.`."""
    s = draw(st.integers(0, len(spec.stages) - 1))
    stage = spec.stages[s]
    sp = "" if len(spec.stages) == 1 else f"stages.{s}."
    if isinstance(stage.block, tuple):
        i = draw(st.integers(0, len(stage.block) - 1))
        bp, blk = f"{sp}block.{i}", stage.block[i]
    else:
        bp, blk = f"{sp}block", stage.block
    h, w = spec.img_size
    p = spec.embedder.patch_size
    n_blocks = len(stage.block) if isinstance(stage.block, tuple) else 1

    def one(key: str, value: Any, path: str | None = None) -> tuple[list[tuple[str, Any]], str]:
        return [(key, value)], key if path is None else path

    options = [
        # negative / zero sizes and out-of-range floats
        one(f"{sp}depth", draw(st.integers(-3, 0))),
        one(f"{sp}dim", draw(st.integers(-3, 0))),
        one("num_classes", draw(st.integers(-3, -1))),
        one("in_chans", draw(st.integers(-3, 0))),
        one("img_size", [draw(st.integers(-3, 0)), w]),
        one("embedder.patch_size", draw(st.integers(-3, 0))),
        one(f"{bp}.attention.heads", draw(st.integers(-3, 0))),
        one(f"{bp}.attention.head_dim", draw(st.integers(-3, 0))),
        one(f"{bp}.attention.scale", draw(st.sampled_from([0.0, -0.5]))),
        one(f"{bp}.attention.attn_drop", draw(st.sampled_from([1.0, -0.1, 2.5]))),
        one(f"{bp}.ffn.hidden", draw(st.integers(-3, 0))),
        one(f"{bp}.ffn.ratio", draw(st.sampled_from([0.0, -1.0, -4]))),
        one(f"{bp}.norm.eps", draw(st.sampled_from([0.0, -1e-6]))),
        one(f"{bp}.layer_scale", draw(st.sampled_from([0.0, -0.1]))),
        one("drop_path", draw(st.sampled_from([1.0, -0.1, 1.5]))),
        one("head.drop", draw(st.sampled_from([1.0, -0.5]))),
        # sizes torch cannot take, floats that are not finite
        one(draw(st.sampled_from([f"{sp}depth", f"{sp}dim", "num_classes", "in_chans", "embedder.patch_size",
                                  f"{bp}.attention.heads", f"{bp}.ffn.hidden"])),
            draw(st.sampled_from([2**31, 10**40]))),
        one(draw(st.sampled_from([f"{bp}.ffn.ratio", f"{bp}.norm.eps", "drop_path", f"{bp}.attention.proj_drop"])),
            draw(st.sampled_from([float("nan"), float("inf"), -float("inf"), 10**400]))),
        # wrong types
        one(f"{sp}depth", str(stage.depth)),
        one(f"{sp}dim", float(stage.dim)),
        one(f"{sp}depth", True),
        one(f"{bp}.attention.heads", str(blk.attention.heads)),
        one(f"{bp}.ffn.hidden", "64"),
        one("drop_path", draw(st.booleans())),
        one(f"{bp}.norm.eps", True),
        one(f"{bp}.ffn.ratio", "4.0"),
        one(f"{bp}.layer_scale", False),
        one("class_token", draw(st.sampled_from([0, 1, "true", None]))),
        one("final_norm", 1),
        one(f"{bp}.attention.qkv_bias", 1),
        one(f"{bp}.ffn.bias", "yes"),
        one("pos_embed", draw(st.sampled_from(["rope", "LEARNED", True, 1]))),
        one("init", "xavier"),
        one(f"{bp}.ffn.act", draw(st.sampled_from(["tanh", "GELU", 3]))),
        one(f"{bp}.norm.kind", draw(st.sampled_from(["rms", "rmsnorm", None]))),
        one("img_size", draw(st.sampled_from([str(h), float(h), [h], [h, w, w], True, None]))),
        one("img_size", [h, str(w)], "img_size.1"),
        one(f"{sp}depth", None),
        one(f"{bp}.norm", draw(st.sampled_from([1, [], None]))),
        one("head", draw(st.sampled_from([3, None, [], True]))),
        one("embedder", draw(st.sampled_from([None, 7]))),
        one(f"{sp}block", draw(st.sampled_from([3, "block", None, []]))),
        # unknown keys
        one(draw(st.sampled_from(["foo", "blocks", "num_heads"])), 1),
        one(f"{bp}.attention.windows", 7),
        one(f"{bp}.ffn.gated", True),
        one(f"{bp}.norm.affine", False),
        one("head.pool", "avg"),
        one("embedder.stride", 2),
        # unknown kinds
        one("embedder.kind", draw(st.sampled_from(["conv", "Patch", "mhsa"]))),
        one("head.kind", draw(st.sampled_from(["token", "GAP", "mlp", 0]))),
        one(f"{bp}.attention.kind", draw(st.sampled_from(["linear", "mlp"]))),
        one(f"{bp}.ffn.kind", draw(st.sampled_from(["glu", "mhsa"]))),
        # heads not dividing dim (implicit head_dim)
        ([(f"{bp}.attention.head_dim", None), (f"{bp}.attention.heads", stage.dim + 1)], f"{bp}.attention.heads"),
        # patch size not dividing the image
        one("embedder.patch_size", h + 1),
        # class-token head without a class token
        ([("class_token", False), ("head", {"kind": "class_token", "drop": 0.0})], "head"),
        # depth not matching the listed blocks
        ([(f"{sp}block", [to_dict(blk)] * 2), (f"{sp}depth", 3)], f"{sp}depth"),
        one(f"{sp}depth", n_blocks + 1) if isinstance(stage.block, tuple) else one(f"{sp}depth", 0),
    ]
    if p > 1:
        options.append(one("img_size", [h + 1, w], "embedder.patch_size"))
    if isinstance(spec.embedder, PatchEmbed):
        options.append(one("embedder.bias", 1))
    else:
        options.append(one("embedder.norm.eps", 0.0))
        options.append(one("embedder.norm", None))
    if isinstance(spec.head, GAPHead):
        options.append(one("head.norm", 3))
        options.append(one("head.norm.eps" if spec.head.norm is not None else "head.norm",
                           -1.0 if spec.head.norm is not None else 1))
    if isinstance(stage.block, tuple):
        j = draw(st.integers(0, n_blocks - 1))
        options.append(one(f"{sp}block.{j}", draw(st.sampled_from([1, "block", None]))))
    if spec.pos_embed != "sincos2d" and spec.stages[0].dim % 4:
        options.append(one("pos_embed", "sincos2d"))
    if spec.pos_embed != "sincos1d" and spec.stages[0].dim % 2:
        options.append(one("pos_embed", "sincos1d"))
    if isinstance(blk.attention, WindowMHSA):
        options.append(one(f"{bp}.attention.window", draw(st.integers(-2, 0))))
        options.append(one(f"{bp}.attention.shift", 1))
    if not sp:  # the one-stage shorthand beside an empty stages list (which it would ignore)
        options.append(one("stages", []))
    if sp:  # several stages: no root shorthand, a first stage without entry, entries with their own fields
        options.append(one(draw(st.sampled_from(["depth", "dim", "block"])), 2))
        options.append(one("stages.0.entry", {"kind": "patch_merging"}))
        options.append(one("stages.1.entry.norm.eps", 0.0))
        options.append(one("stages.1.entry.kind", "pixel_shuffle"))
        options.append(one("stages", []))
        if spec.stages[1].dim != spec.stages[0].dim:
            options.append(one("stages.1.entry", None, "stages.1.dim"))
    return draw(st.sampled_from(options))


@st.composite
def invalid_specs(draw, models: st.SearchStrategy[Model] | None = None) -> tuple[dict[str, Any], str]:
    """(unstructured spec with one thing broken, the field path its SpecError must name)."""
    spec = draw(models if models is not None else valid_models())
    changes, path = draw(breakages(spec))
    return apply_changes(to_dict(spec), changes), path


@st.composite
def invalid_deletions(draw) -> tuple[dict[str, Any], str]:
    """A required `kind` tag removed from a tagged-union component."""
    spec = draw(valid_models())
    key = draw(st.sampled_from(["embedder.kind", "head.kind"]))
    return apply_changes(to_dict(spec), [(key, DELETE)]), key


@st.composite
def invalid_overrides(draw) -> tuple[Model, dict[str, Any], str]:
    """(valid spec, override assignments that break it, the path the SpecError must name)."""
    spec = draw(valid_models())
    changes, path = draw(breakages(spec))
    return spec, dict(changes), path
