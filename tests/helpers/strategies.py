"""Hypothesis strategies for vspec specs.

`valid_models()` draws small valid `Model` specs covering every component kind and option: the
`model_drafts()` (model fields) that `single_token_path` finds no attention over 1 token in; drafts
that have one (`model_drafts(single_token=True)` always does) must be refused naming that path. Ways to
break them: tests/helpers/breakages.py.

`KIND_MODELS` and `KIND_RULES` hold, for every component kind, small models that use it and the rules a change of its
fields breaks: the core kinds' here, each family's in its own strategies module (`family_strategies`:
tests/models/<family>/strategies.py), added when this module is imported; the helpers they share are here
(`isotropic_model`, `attention_rules`, ...).
"""

from __future__ import annotations

import importlib
import typing
from typing import Any, Literal

import attrs
from hypothesis import strategies as st

from vspec.spec import (
    MHSA,
    MLP,
    Block,
    ClassTokenHead,
    ConvStem,
    DenseAux,
    FirstTokenHead,
    GAPHead,
    HeadTokenBlock,
    LastTokenHead,
    Model,
    Norm,
    PatchEmbed,
    PatchMerging,
    PostNormBlock,
    Projections,
    SimplePatchEmbed,
    SoTEmbed,
    Stage,
    TokenEmbed,
    WindowMHSA,
    families,
)

ACTS = ("gelu", "gelu_tanh", "relu", "silu")
POS_EMBEDS = ("none", "learned", "sincos1d", "sincos2d")


# ---------------------------------------------------------------------------------------------
# valid specs


def small_floats(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False)


def drops() -> st.SearchStrategy[float]:
    return st.one_of(st.just(0.0), small_floats(0.0, 0.5))


def norms() -> st.SearchStrategy[Norm]:
    return st.builds(Norm, kind=st.sampled_from(("layernorm", "batchnorm", "none")), eps=small_floats(1e-7, 1e-2))


def embedders(patch_size: int) -> st.SearchStrategy[PatchEmbed | SimplePatchEmbed]:
    return st.one_of(
        st.builds(PatchEmbed, patch_size=st.just(patch_size), bias=st.booleans(), norm=st.one_of(st.none(), norms())),
        st.builds(SimplePatchEmbed, patch_size=st.just(patch_size), norm=norms()),
    )


@st.composite
def window_attentions(draw, dim: int, grid: tuple[int, int]) -> WindowMHSA:
    """Window sizes whose window, clamped to the grid, divides it (larger than the grid included)."""
    windows = [w for w in range(1, max(grid) + 2) if all(g % min(w, g) == 0 for g in grid)]
    a = draw(attentions(dim))
    return WindowMHSA(heads=a.heads, window=draw(st.sampled_from(windows)), shift=draw(st.booleans()),
                      head_dim=a.head_dim, qkv_bias=a.qkv_bias, proj_bias=a.proj_bias, scale=a.scale,
                      attn_drop=a.attn_drop, proj_drop=a.proj_drop, projections=a.projections)


# the MSF paper's projection tyings (roles QUERY KEY VALUE [PROBE] WEIGHT; equal letters share a matrix)
TABLE1 = ("QQQQQ", "QKKQQ", "QQVVV", "QQVVQ", "QQQPP", "QKKKQ", "QKKQK", "QKKKW", "QKKQW", "QKKPP", "QKKPQ",
          "QQVPW", "QKKPW", "QKVVW", "QKVPP", "QKVQW", "QKVPQ", "QKVPW")
TABLE2 = ("QQQQ", "QKKQ", "QQQW", "QQVQ", "QQVV", "QQVW", "QKKW", "QKVV", "QKVW")


@st.composite
def projections(draw, rows: tuple[str, ...], dim: int, inner: int) -> Projections:
    """A tying of `rows` (or all untied) and groups dividing both widths, either grouping."""
    groups = draw(st.sampled_from([g for g in (1, 2, 4) if dim % g == 0 and inner % g == 0]))
    return Projections(roles=draw(st.one_of(st.none(), st.sampled_from(rows))), groups=groups,
                       grouping=draw(st.sampled_from(("interleaved", "block"))))


@st.composite
def attentions(draw, dim: int, tied: bool = True) -> MHSA:
    if draw(st.booleans()):  # heads dividing dim, implicit head_dim
        heads = draw(st.sampled_from([h for h in range(1, min(dim, 8) + 1) if dim % h == 0]))
        head_dim = None
    else:  # explicit head_dim: any number of heads
        heads = draw(st.integers(1, 4))
        head_dim = draw(st.integers(1, 16))
    inner = heads * (head_dim or dim // heads)
    return MHSA(
        heads=heads,
        head_dim=head_dim,
        qkv_bias=draw(st.booleans()),
        proj_bias=draw(st.booleans()),
        scale=draw(st.one_of(st.none(), small_floats(0.05, 2.0))),
        attn_drop=draw(drops()),
        proj_drop=draw(drops()),
        projections=draw(st.one_of(st.none(), projections(TABLE2, dim, inner))) if tied else None,
    )


@st.composite
def ffns(draw, dim: int) -> MLP:
    hidden = draw(st.one_of(st.none(), st.integers(1, 64)))
    # keep int(dim * ratio) >= 1 so that an unset `hidden` gives a real layer
    ratio = draw(small_floats(max(0.25, 1.0 / dim), 4.0))
    return MLP(hidden=hidden, ratio=ratio, act=draw(st.sampled_from(ACTS)), bias=draw(st.booleans()),
               drop=draw(drops()), layer_scale=draw(st.one_of(st.none(), small_floats(1e-5, 1.0))))


@st.composite
def blocks(draw, dim: int, grid: tuple[int, int] | None = None) -> Block:
    """A block; with the token `grid` of a body without class token, its attention may be windowed."""
    windowed = grid is not None and draw(st.booleans())
    return Block(
        attention=draw(window_attentions(dim, grid) if windowed else attentions(dim)),
        ffn=draw(ffns(dim)),
        norm=draw(norms()),
        layer_scale=draw(st.one_of(st.none(), small_floats(1e-5, 1.0))),
    )


def stacks(dim: int, depth: int, grid: tuple[int, int] | None = None):
    """One block repeated, or an explicit heterogeneous stack of `depth` different blocks."""
    return st.one_of(blocks(dim, grid), st.lists(blocks(dim, grid), min_size=depth, max_size=depth, unique=True)
                     .map(tuple))


@st.composite
def hierarchical_drafts(draw, single_token: bool = False) -> dict[str, Any]:
    """Model fields of 2-3 stages joined by patch merging (no class token), window or global attention in
    any stage. Some attend over 1 token (a window of 1, or a last stage on a 1x1 grid), which the spec
    refuses: `single_token_path` says where; with `single_token` the last stage is always on a 1x1 grid."""
    n_stages = draw(st.integers(2, 3))
    patch = draw(st.integers(1, 4))
    scale = (1, 1) if single_token else (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    grid = (scale[0] * 2 ** (n_stages - 1), scale[1] * 2 ** (n_stages - 1))
    pos_embed = draw(st.sampled_from(POS_EMBEDS))
    img_size = (patch * grid[0], patch * grid[1])
    stages = []
    for i in range(n_stages):
        dim = 4 * draw(st.integers(1, 6)) if i == 0 and pos_embed.startswith("sincos") else draw(st.integers(2, 24))
        depth = draw(st.integers(1, 3))
        entry = PatchMerging(norm=draw(norms()), bias=draw(st.booleans())) if i else None
        stages.append(Stage(depth=depth, dim=dim, block=draw(stacks(dim, depth, grid)), entry=entry))
        grid = (grid[0] // 2, grid[1] // 2)
    head = GAPHead(norm=draw(st.one_of(st.none(), norms())), drop=draw(drops()))
    return dict(embedder=draw(embedders(patch)), stages=stages, img_size=img_size, class_token=False,
                pos_embed=pos_embed, head=head, **draw(model_options()))


def single_token_path(fields: dict[str, Any]) -> str | None:
    """The field path that the SpecError of a model with these (otherwise valid) fields must name because a
    softmax in it runs over 1 token, or None: the tests' own count, from the fields alone. Each query
    of global attention sees the grid, the class token and a block's head tokens (one per head); of window
    attention, its window clamped to the grid; SoT's nonlocal embedding attends over the token grid."""
    embedder, size = fields["embedder"], fields["img_size"]
    h, w = (size, size) if isinstance(size, int) else size
    grid = (h // embedder.patch_size, w // embedder.patch_size)
    if isinstance(embedder, SoTEmbed) and embedder.block == "nonlocal" and grid == (1, 1):
        return "embedder.block"
    if "stages" in fields:
        stages, where = fields["stages"], [f"stages.{s}." for s in range(len(fields["stages"]))]
        if len(stages) == 1:
            where = [""]
    else:
        stages, where = [Stage(depth=fields["depth"], dim=fields["dim"], block=fields["block"])], [""]
    for stage, prefix in zip(stages, where):
        if stage.entry is not None:
            grid = (grid[0] // 2, grid[1] // 2)
        listed = [("block", stage.block)] if isinstance(stage.block, Block) else \
            [(f"block.{i}", b) for i, b in enumerate(stage.block)]
        for path, block in listed:
            a = block.attention
            if isinstance(a, WindowMHSA):
                if a.window == 1:
                    return f"{prefix}{path}.attention.window"
                keys = min(a.window, grid[0]) * min(a.window, grid[1])
            else:
                keys = grid[0] * grid[1] + int(fields.get("class_token", True))
                keys += a.heads if isinstance(block, HeadTokenBlock) else 0
            if keys == 1 and not getattr(a, "reuse", False):  # a reusing block has no query or key weights
                return f"{prefix}{path}.attention"
    return None


def model_options() -> st.SearchStrategy[dict[str, Any]]:
    """The fields of a model that any body takes."""
    return st.fixed_dictionaries(dict(
        num_classes=st.integers(1, 10), in_chans=st.integers(1, 3), final_norm=st.booleans(),
        drop_path=st.one_of(st.just(0.0), st.floats(0.0, 0.3, exclude_max=True)),
        init=st.sampled_from(("timm", "torch")),
    ))


@st.composite
def isotropic_drafts(draw, single_token: bool = False) -> dict[str, Any]:
    """Model fields of one stage (the isotropic ViT family); with `single_token`, on a 1x1 grid without
    class token (refused: attention over 1 token)."""
    pos_embed = draw(st.sampled_from(POS_EMBEDS))
    if pos_embed == "sincos2d":
        dim = 4 * draw(st.integers(1, 12))
    elif pos_embed == "sincos1d":
        dim = 2 * draw(st.integers(1, 24))
    else:
        dim = draw(st.integers(2, 48))
    depth = draw(st.integers(1, 3))
    block = draw(stacks(dim, depth))
    patch = draw(st.integers(1, 8))
    gh, gw = (1, 1) if single_token else (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    img_size: int | tuple[int, int] = (patch * gh, patch * gw)
    if gh == gw and draw(st.booleans()):
        img_size = patch * gh  # the int shorthand
    class_token = not single_token and draw(st.booleans())
    if class_token and draw(st.booleans()):
        head: ClassTokenHead | GAPHead = ClassTokenHead(drop=draw(drops()))
    else:
        head = GAPHead(norm=draw(st.one_of(st.none(), norms())), drop=draw(drops()))
    return dict(embedder=draw(embedders(patch)), block=block, depth=depth, dim=dim, img_size=img_size,
                class_token=class_token, pos_embed=pos_embed, head=head, **draw(model_options()))


@st.composite
def model_drafts(draw, single_token: bool = False) -> tuple[dict[str, Any], str | None]:
    """(model fields, `single_token_path` of them): one stage or, one time in three, several stages. The
    fields are valid but for attention over 1 token, which the drafts may (with `single_token`, do) have."""
    fields = draw(hierarchical_drafts(single_token) if draw(st.integers(0, 2)) == 0 else isotropic_drafts(single_token))
    return fields, single_token_path(fields)


def valid_models() -> st.SearchStrategy[Model]:
    """Small valid models: the drafts whose every attention sees 2 tokens or more."""
    return model_drafts().filter(lambda case: case[1] is None).map(lambda case: Model(**case[0]))


# ---------------------------------------------------------------------------------------------
# one strategy per component kind: small models that use it, with its options drawn


def isotropic_model(**changes) -> Model:
    base = dict(embedder=PatchEmbed(patch_size=4), block=Block(attention=MHSA(heads=2)), depth=2, dim=16,
                num_classes=3, img_size=16)
    return Model(**{**base, **changes})


def hierarchical_model(block: Block | None = None, entry: PatchMerging | None = None, **changes) -> Model:
    """Two stages on a 4 x 4 grid (16 px, patch 4), the second after a patch merging."""
    block = block or Block(attention=MHSA(heads=2))
    stages = [Stage(depth=2, dim=16, block=block), Stage(depth=2, dim=32, block=block, entry=entry or PatchMerging())]
    return Model(**{**dict(embedder=PatchEmbed(patch_size=4), stages=stages, num_classes=3, img_size=16,
                           class_token=False, head=GAPHead()), **changes})


def text_model(**changes) -> Model:
    """A BERT-like text body: 8 tokens of a 50-word vocabulary, two post-norm blocks, the first-token head."""
    base = dict(embedder=TokenEmbed(vocab_size=50, max_positions=12, seq_len=8, padding_id=0, norm=Norm(eps=1e-12)),
                block=PostNormBlock(attention=MHSA(heads=2)), depth=2, dim=16, num_classes=3,
                class_token=False, pos_embed="none", final_norm=False, head=FirstTokenHead(pooler="tanh"))
    return Model(**{**base, **changes})


@st.composite
def token_embeds(draw) -> TokenEmbed:
    padding_id = draw(st.one_of(st.none(), st.integers(0, 3)))
    pad_positions = padding_id is not None and draw(st.booleans())
    seq_len = draw(st.integers(2, 8))
    first = padding_id + 1 if pad_positions else 0
    return TokenEmbed(vocab_size=draw(st.integers(8, 40)), max_positions=first + seq_len + draw(st.integers(0, 4)),
                      seq_len=seq_len, type_vocab_size=draw(st.integers(0, 2)), padding_id=padding_id,
                      pad_positions=pad_positions, norm=draw(st.one_of(st.none(), norms())), drop=draw(drops()),
                      width=draw(st.sampled_from([None, 8, 16])))


CORE_MODELS: dict[type, st.SearchStrategy[Model]] = {  # the core kinds' (KIND_MODELS adds every family's)
    PatchEmbed: embedders(4).filter(lambda e: isinstance(e, PatchEmbed)).map(lambda e: isotropic_model(embedder=e)),
    SimplePatchEmbed: st.builds(SimplePatchEmbed, patch_size=st.sampled_from([2, 4]), norm=norms())
    .map(lambda e: isotropic_model(embedder=e)),
    MHSA: attentions(16).map(lambda a: isotropic_model(block=Block(attention=a))),
    WindowMHSA: window_attentions(16, (4, 4)).filter(lambda a: a.window > 1)
    .map(lambda a: hierarchical_model(Block(attention=a))),
    ConvStem: st.builds(ConvStem, patch_size=st.sampled_from([2, 4]), width=st.integers(1, 4),
                        growth=st.integers(1, 2))
    .map(lambda e: isotropic_model(embedder=e, img_size=4 * e.patch_size)),
    MLP: ffns(16).map(lambda f: isotropic_model(block=Block(attention=MHSA(heads=2), ffn=f))),
    Block: st.builds(Block, attention=attentions(16), norm=norms(),
                     layer_scale=st.one_of(st.none(), small_floats(1e-5, 1.0))).map(lambda b: isotropic_model(block=b)),
    PostNormBlock: st.one_of(
        st.builds(PostNormBlock, attention=st.just(MHSA(heads=2)), norm=norms()).map(lambda b: text_model(block=b)),
        st.builds(PostNormBlock, attention=attentions(16)).map(lambda b: isotropic_model(block=b, final_norm=False))),
    PatchMerging: st.builds(PatchMerging, norm=norms(), bias=st.booleans())
    .map(lambda e: hierarchical_model(entry=e)),
    ClassTokenHead: st.builds(ClassTokenHead, drop=drops(), dense=st.one_of(st.none(), st.builds(
        DenseAux, loss_weight=small_floats(0.1, 2.0), eval_weight=small_floats(0.1, 2.0))))
    .map(lambda h: isotropic_model(head=h)),
    GAPHead: st.builds(GAPHead, norm=st.one_of(st.none(), norms()), drop=drops())
    .map(lambda h: isotropic_model(head=h)),
    TokenEmbed: st.tuples(token_embeds(), st.booleans()).map(lambda t: text_model(
        embedder=t[0], block=(PostNormBlock if t[1] else Block)(attention=MHSA(heads=2)), final_norm=not t[1])),
    FirstTokenHead: st.builds(FirstTokenHead, pooler=st.sampled_from([None, "tanh", "gelu"]), drop_in=drops(),
                              drop=drops()).map(lambda h: text_model(head=h)),
    LastTokenHead: st.builds(LastTokenHead, bias=st.booleans(), drop=drops()).map(lambda h: text_model(
        head=h, causal=True, block=Block(attention=MHSA(heads=2)), final_norm=True)),
}


# ---------------------------------------------------------------------------------------------
# one way to break a model of KIND_MODELS[cls], for every kind: any field given a value of the wrong type
# or range, an unknown key or kind, or a rule that ties the kind to the rest of the model


def component_paths(spec: Any, cls: type, prefix: str = "") -> list[str]:
    """The dotted paths (in `to_dict(spec)`) of every instance of `cls` in the spec tree."""
    out = [prefix] if isinstance(spec, cls) else []
    if isinstance(spec, Model):
        items = [(f, getattr(spec, f)) for f in ("embedder", "head")]
        items += [("block", spec.block)] if spec.isotropic else [("stages", spec.stages)]
    elif isinstance(spec, tuple):
        items = list(enumerate(spec))
    elif attrs.has(type(spec)):
        items = [(f.name, getattr(spec, f.name)) for f in attrs.fields(type(spec))]
    else:
        items = []
    for key, value in items:
        out += component_paths(value, cls, f"{prefix}.{key}" if prefix else str(key))
    return out


def _bad_values(field_type: Any) -> list[Any]:
    """Values that no field of this type takes (every size field is >= 0 and <= 2**31 - 1, every float
    field finite and >= 0)."""
    args = [t for t in typing.get_args(field_type) if t is not type(None)] or [field_type]
    if typing.get_origin(field_type) is Literal:
        return ["bogus", 7]
    if args[0] is int:
        return [-1, 2**31, 10**40, "2", "9" * 10_000, True, 1.5]
    if args[0] is float:
        return [-1.0, float("nan"), float("inf"), -float("inf"), 10**400, "0.1", True]
    if args[0] is bool:
        return [1, "yes", None]
    if typing.get_origin(args[0]) is Literal:
        return ["bogus", 7]
    return [3, [1]]  # a component or a norm (a string would set its kind, in an override)


@st.composite
def field_breakages(draw, spec: Model, cls: type) -> tuple[list[tuple[str, Any]], str]:
    """One field of one `cls` in `spec` given a value it does not take, or an unknown key or kind."""
    path = draw(st.sampled_from(component_paths(spec, cls)))
    options = [([(f"{path}.no_such_option", 1)], f"{path}.no_such_option")]
    if isinstance(getattr(cls, "kind", None), str) and "kind" not in attrs.fields_dict(cls):
        options.append(([(f"{path}.kind", "bogus")], f"{path}.kind"))
    for f in attrs.fields(cls):
        options += [([(f"{path}.{f.name}", v)], f"{path}.{f.name}") for v in _bad_values(f.type)]
    return draw(st.sampled_from(options))


# an isotropic model of KIND_MODELS (16 px, patch 4) on a 1x1 grid without class token: 1 token to attend
SINGLE_TOKEN = [("img_size", 4), ("class_token", False), ("head", {"kind": "gap"})]


def embedder_rules(spec) -> list:
    """The rules of any patch embedder: a patch size that does not divide the image; a patch of in_chans x p^2
    values, or the conv stem's last growth^2 x width channels, past the largest size."""
    (h, w) = spec.img_size
    out = [([("img_size", [h + 1, w])], "embedder.patch_size")]
    if isinstance(spec.embedder, SimplePatchEmbed):
        out.append(([("embedder.patch_size", 2**16), ("img_size", 2**16), ("in_chans", 3)], "embedder.patch_size"))
    if isinstance(spec.embedder, ConvStem):
        out.append(([("embedder.width", 2**20), ("embedder.growth", 64)], "embedder.width"))
    return out


def attention_rules(cls: type):
    """The rules of any attention kind `cls` (a family's adds its own): heads that do not divide dim, a head_dim past
    the largest size, and nothing to attend (1 token, or windows that do not fit the grid)."""
    def rules(spec):
        path = component_paths(spec, cls)[0]
        out = [([(f"{path}.heads", 3), (f"{path}.head_dim", None)], f"{path}.heads"),
               ([(f"{path}.heads", 2**16), (f"{path}.head_dim", 2**16)], f"{path}.head_dim")]
        if issubclass(cls, WindowMHSA):
            out += [([(f"{path}.window", 3)], f"{path}.window"), ([("class_token", True)], path),
                    ([(f"{path}.window", 1)], f"{path}.window"),  # 1 token per window: nothing to attend
                    ([("img_size", 8)], "stages.1.block.attention")]  # a 1x1 grid after the merging
        else:  # a 1x1 grid, no class token: 1 token, nothing to attend
            out.append((SINGLE_TOKEN, path))
        if cls is MHSA:
            out += [([(f"{path}.projections", {"roles": "QKVPW"})], f"{path}.projections.roles"),
                    ([(f"{path}.projections", {"groups": 3})], f"{path}.projections.groups")]
        return out
    return rules


def ffn_rules(cls: type):
    """The rules of any FFN kind `cls` (a family's adds its own): a hidden width of zero or past the largest size."""
    def rules(spec):
        path = component_paths(spec, cls)[0]
        return [([(f"{path}.hidden", None), (f"{path}.ratio", 0.01)], f"{path}.ratio"),
                ([(f"{path}.hidden", None), (f"{path}.ratio", 1e300)], f"{path}.ratio")]
    return rules


# For every kind, `rules(spec)`: changes to a model of KIND_MODELS[kind] that break a rule tying the kind to the rest
# of the model (all fields valid on their own): a derived width of zero or above 2**31 - 1, a shape that does not
# fit, an option that would do nothing. [(changes, path), ...]. The core kinds' (KIND_RULES adds every family's)
CORE_RULES: dict[type, Any] = {
    PatchEmbed: embedder_rules, SimplePatchEmbed: embedder_rules, ConvStem: embedder_rules,
    MHSA: attention_rules(MHSA), WindowMHSA: attention_rules(WindowMHSA),
    MLP: ffn_rules(MLP),
    Block: lambda spec: [([("block.layer_scale", 0.0)], "block.layer_scale"),
                         ([("block.norm.eps", 0.0)], "block.norm.eps")],
    PostNormBlock: lambda spec: [([("block.layer_scale", -1.0)], "block.layer_scale"),
                                 ([("block.adjust_ratio", 0.5)], "block.adjust_ratio")],
    PatchMerging: lambda spec: [
        ([("img_size", [spec.img_size[0] + spec.embedder.patch_size, spec.img_size[1]])], "stages.1.entry"),
        ([("class_token", True)], "stages.1.entry"),
        ([("stages.0.entry", {"kind": "patch_merging"})], "stages.0.entry")],
    ClassTokenHead: lambda spec: [([("class_token", False)], "head"),  # and a dense head's weights
                                  ([("head.dense", {"loss_weight": 0.0})], "head.dense.loss_weight"),
                                  ([("head.dense", {"eval_weight": 0.0})], "head.dense.eval_weight"),
                                  ([("head.dense", {"weight": 0.5})], "head.dense.weight")],
    GAPHead: lambda spec: [([("head.norm", {"kind": "layernorm", "eps": 0.0})], "head.norm.eps")],
    TokenEmbed: lambda spec: [  # positions the table lacks; a padding id outside the vocabulary; image options
        ([("embedder.seq_len", spec.embedder.max_positions + 1)], "embedder.seq_len"),
        ([("embedder.padding_id", spec.embedder.vocab_size)], "embedder.padding_id"),
        ([("embedder.padding_id", None), ("embedder.pad_positions", True)], "embedder.pad_positions"),
        ([("class_token", True)], "class_token"), ([("pos_embed", "learned")], "pos_embed"),
        ([("block.ffn", {"kind": "daff"})], "block.ffn"),
        ([("block.attention", {"kind": "refiner", "heads": 2, "refine": {"form": "released"}})],
         "block.attention.refine.form")],
    FirstTokenHead: lambda spec: [([("head", {"kind": "class_token"})], "head"),
                                  ([("head", {"kind": "second_order", "z0": "last_token", "padding": "included"})],
                                   "head.padding")],
    LastTokenHead: lambda spec: [([("block.attention", {"kind": "window_mhsa", "heads": 2})], "block.attention"),
                                 ([("block.kind", "head_tokens")], "block.head_tokens")],
}


@st.composite
def kind_breakages(draw, spec: Model, cls: type) -> tuple[list[tuple[str, Any]], str]:
    """A field breakage or a rule breakage of `cls` in `spec`."""
    rules = kind_tables()["KIND_RULES"][cls](spec)
    if rules and draw(st.booleans()):
        return draw(st.sampled_from(rules))
    return draw(field_breakages(spec, cls))


def family_strategies(package: str) -> str:
    """Where the strategies of a family package's kinds live: tests/models/<family>/strategies.py for vspec's own
    (`vspec.models.<family>`), `<package>.strategies` beside any other family (tests/toy_family)."""
    if package.startswith("vspec.models."):
        return f"tests.models.{package.rpartition('.')[2]}.strategies"
    return f"{package}.strategies"


_tables: dict[str, dict] = {}  # "KIND_MODELS", "KIND_RULES": the core's and every family's, made when first asked for


def kind_tables() -> dict[str, dict]:
    """`KIND_MODELS` and `KIND_RULES`: the core kinds' and every loaded family's (its `family_strategies` module's
    tables; a family without that module adds none, and tests/spec/test_kinds.py fails for each of its kinds). Made
    once, when first asked for (a family's strategies import this module's helpers), then the same dicts."""
    if not _tables:
        models, rules = dict(CORE_MODELS), dict(CORE_RULES)
        for package in families.load():
            name = family_strategies(package)
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as e:
                if not f"{name}.".startswith(f"{e.name}."):  # a module the strategies import is missing: not ours
                    raise
                continue
            models.update(module.KIND_MODELS)
            rules.update(module.KIND_RULES)
        _tables.update(KIND_MODELS=models, KIND_RULES=rules)
    return _tables


def __getattr__(name: str):
    if name in ("KIND_MODELS", "KIND_RULES"):
        return kind_tables()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
