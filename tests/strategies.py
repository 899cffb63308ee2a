"""Hypothesis strategies for vspec specs.

`valid_models()` draws small valid `Model` specs covering every component kind and option.
`breakages(spec)` draws one way to break a valid spec: a sequence of dotted assignments (or key
deletions) plus the field path the resulting SpecError must name. `invalid_specs()` applies a breakage
to `to_dict(spec)` (feed the result to `from_dict`); `invalid_overrides()` gives the same breakages as
`override()` arguments.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from vspec.spec import (
    MHSA,
    MLP,
    Block,
    ClassTokenHead,
    GAPHead,
    Model,
    Norm,
    PatchEmbed,
    SimplePatchEmbed,
    to_dict,
)

ACTS = ("gelu", "gelu_tanh", "relu", "silu")
POS_EMBEDS = ("none", "learned", "sincos1d", "sincos2d")

DELETE = object()  # a breakage value meaning "remove this key"


# ---------------------------------------------------------------------------------------------
# valid specs


def small_floats(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False)


def drops() -> st.SearchStrategy[float]:
    return st.one_of(st.just(0.0), small_floats(0.0, 0.5))


def norms() -> st.SearchStrategy[Norm]:
    return st.builds(Norm, kind=st.sampled_from(("layernorm", "none")), eps=small_floats(1e-7, 1e-2))


def embedders(patch_size: int) -> st.SearchStrategy[PatchEmbed | SimplePatchEmbed]:
    return st.one_of(
        st.builds(PatchEmbed, patch_size=st.just(patch_size), bias=st.booleans()),
        st.builds(SimplePatchEmbed, patch_size=st.just(patch_size), norm=norms()),
    )


@st.composite
def attentions(draw, dim: int) -> MHSA:
    if draw(st.booleans()):  # heads dividing dim, implicit head_dim
        heads = draw(st.sampled_from([h for h in range(1, min(dim, 8) + 1) if dim % h == 0]))
        head_dim = None
    else:  # explicit head_dim: any number of heads
        heads = draw(st.integers(1, 4))
        head_dim = draw(st.integers(1, 16))
    return MHSA(
        heads=heads,
        head_dim=head_dim,
        qkv_bias=draw(st.booleans()),
        proj_bias=draw(st.booleans()),
        scale=draw(st.one_of(st.none(), small_floats(0.05, 2.0))),
        attn_drop=draw(drops()),
        proj_drop=draw(drops()),
    )


@st.composite
def ffns(draw, dim: int) -> MLP:
    hidden = draw(st.one_of(st.none(), st.integers(1, 64)))
    # keep int(dim * ratio) >= 1 so that an unset `hidden` gives a real layer
    ratio = draw(small_floats(max(0.25, 1.0 / dim), 4.0))
    return MLP(hidden=hidden, ratio=ratio, act=draw(st.sampled_from(ACTS)), bias=draw(st.booleans()),
               drop=draw(drops()))


@st.composite
def blocks(draw, dim: int) -> Block:
    return Block(
        attention=draw(attentions(dim)),
        ffn=draw(ffns(dim)),
        norm=draw(norms()),
        layer_scale=draw(st.one_of(st.none(), small_floats(1e-5, 1.0))),
    )


@st.composite
def valid_models(draw) -> Model:
    pos_embed = draw(st.sampled_from(POS_EMBEDS))
    if pos_embed == "sincos2d":
        dim = 4 * draw(st.integers(1, 12))
    elif pos_embed == "sincos1d":
        dim = 2 * draw(st.integers(1, 24))
    else:
        dim = draw(st.integers(2, 48))
    depth = draw(st.integers(1, 3))
    if draw(st.booleans()):
        block: Block | tuple[Block, ...] = draw(blocks(dim))
    else:  # an explicit heterogeneous stack of `depth` different blocks
        block = tuple(draw(st.lists(blocks(dim), min_size=depth, max_size=depth, unique=True)))
    patch = draw(st.integers(1, 8))
    gh, gw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    img_size: int | tuple[int, int] = (patch * gh, patch * gw)
    if gh == gw and draw(st.booleans()):
        img_size = patch * gh  # the int shorthand
    class_token = draw(st.booleans())
    if class_token and draw(st.booleans()):
        head: ClassTokenHead | GAPHead = ClassTokenHead(drop=draw(drops()))
    else:
        head = GAPHead(norm=draw(st.one_of(st.none(), norms())), drop=draw(drops()))
    return Model(
        embedder=draw(embedders(patch)),
        block=block,
        depth=depth,
        dim=dim,
        num_classes=draw(st.integers(1, 10)),
        img_size=img_size,
        in_chans=draw(st.integers(1, 3)),
        class_token=class_token,
        pos_embed=pos_embed,
        final_norm=draw(st.booleans()),
        head=head,
        drop_path=draw(st.one_of(st.just(0.0), st.floats(0.0, 0.3, exclude_max=True))),
        init=draw(st.sampled_from(("timm", "torch"))),
    )


# ---------------------------------------------------------------------------------------------
# invalid specs


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
    """One way to break `spec`: (changes, expected error path). Each change is (dotted key, value)."""
    if isinstance(spec.block, tuple):
        i = draw(st.integers(0, len(spec.block) - 1))
        bp, blk = f"block.{i}", spec.block[i]
    else:
        bp, blk = "block", spec.block
    h, w = spec.img_size
    p = spec.embedder.patch_size
    n_blocks = len(spec.block) if isinstance(spec.block, tuple) else 1

    def one(key: str, value: Any, path: str | None = None) -> tuple[list[tuple[str, Any]], str]:
        return [(key, value)], key if path is None else path

    options = [
        # negative / zero sizes and out-of-range floats
        one("depth", draw(st.integers(-3, 0))),
        one("dim", draw(st.integers(-3, 0))),
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
        # wrong types
        one("depth", str(spec.depth)),
        one("dim", float(spec.dim)),
        one("depth", True),
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
        one(f"{bp}.norm.kind", draw(st.sampled_from(["batchnorm", "rmsnorm", None]))),
        one("img_size", draw(st.sampled_from([str(h), float(h), [h], [h, w, w], True, None]))),
        one("img_size", [h, str(w)], "img_size.1"),
        one("depth", None),
        one(f"{bp}.norm", draw(st.sampled_from([1, "layernorm", None]))),
        one("head", draw(st.sampled_from(["gap", 3, None, []]))),
        one("embedder", draw(st.sampled_from(["patch", None]))),
        one("block", draw(st.sampled_from([3, "block", None, []]))),
        # unknown keys
        one(draw(st.sampled_from(["foo", "blocks", "num_heads"])), 1),
        one(f"{bp}.attention.window", 7),
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
        ([(f"{bp}.attention.head_dim", None), (f"{bp}.attention.heads", spec.dim + 1)], f"{bp}.attention.heads"),
        # patch size not dividing the image
        one("embedder.patch_size", h + 1),
        # class-token head without a class token
        ([("class_token", False), ("head", {"kind": "class_token", "drop": 0.0})], "head"),
        # depth not matching the listed blocks
        ([("block", [to_dict(blk)] * 2), ("depth", 3)], "depth"),
        one("depth", n_blocks + 1) if isinstance(spec.block, tuple) else one("depth", 0),
    ]
    if p > 1:
        options.append(one("img_size", [h + 1, w], "embedder.patch_size"))
    if isinstance(spec.embedder, PatchEmbed):
        options.append(one("embedder.bias", 1))
    else:
        options.append(one("embedder.norm.eps", 0.0))
        options.append(one("embedder.norm", None))
    if isinstance(spec.head, GAPHead):
        options.append(one("head.norm", "layernorm"))
        options.append(one("head.norm.eps" if spec.head.norm is not None else "head.norm",
                           -1.0 if spec.head.norm is not None else 1))
    if isinstance(spec.block, tuple):
        j = draw(st.integers(0, n_blocks - 1))
        options.append(one(f"block.{j}", draw(st.sampled_from([1, "block", None]))))
    if spec.pos_embed != "sincos2d" and spec.dim % 4:
        options.append(one("pos_embed", "sincos2d"))
    if spec.pos_embed != "sincos1d" and spec.dim % 2:
        options.append(one("pos_embed", "sincos1d"))
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
