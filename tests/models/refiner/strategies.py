"""Hypothesis strategies for Refiner's kinds (found by tests/helpers/strategies.py as the family is): `KIND_MODELS`,
small models using each kind with its options drawn; `KIND_RULES`, the rules tying each kind to the rest of a model
that a change of its fields breaks."""

from hypothesis import strategies as st

from tests.helpers.strategies import (
    SINGLE_TOKEN,
    attentions,
    hierarchical_model,
    isotropic_model,
    text_model,
)
from vspec.spec import (
    MLP,
    AdjustedBlock,
    Block,
    FirstTokenHead,
    LastTokenHead,
    PatchMerging,
    PostNormBlock,
    Refine,
    RefinerAttention,
    Stage,
)


def refines(grid: tuple[int, int], released: bool = True) -> st.SearchStrategy[Refine]:
    """The paper's pipeline with any expansion, kernel (even ones too), constraint and reduction, or (with
    `released`) the released DLA."""
    kernels = st.integers(1, min(grid))
    paper = st.builds(Refine, expansion=st.integers(1, 3), kernel=st.one_of(st.just(0), kernels),
                      constraint=st.sampled_from(("none", "spatial", "row_col")), reduction=st.booleans())
    alone = st.builds(Refine, expansion=st.just(1), kernel=kernels, reduction=st.just(False), expand=st.just(False),
                      constraint=st.sampled_from(("none", "spatial", "row_col")))  # DLA alone (Table 2)
    released_dla = st.builds(Refine, expansion=st.integers(1, 3), kernel=kernels, form=st.just("released"))
    return st.one_of(paper, alone, released_dla) if released else st.one_of(paper, alone)


@st.composite
def refiner_stacks(draw, dim: int, depth: int, grid: tuple[int, int]) -> tuple[Block, ...]:
    """`depth` blocks of refiner attention, each after the first free to reuse the maps handed on or add
    them to its own when their count fits its heads (Table 13, Refined-ViT)."""
    heads = draw(st.sampled_from((1, 2, 4)))
    out: list[Block] = []
    for j in range(depth):
        fits = j > 0 and out[-1].attention.maps_handed_on == heads
        link = draw(st.sampled_from(("none", "reuse", "add_incoming"))) if fits else "none"
        # the released DLA's ReLU6s on its own softmax maps (>= 0): on a handed-on map of any sign, a unit of
        # the eval-mode model at init may be dead, so that its parameters would not learn in this test
        attention = RefinerAttention(heads=heads, refine=draw(st.one_of(st.none(), refines(grid, link == "none"))),
                                     reuse=link == "reuse", add_incoming=link == "add_incoming",
                                     form=draw(st.sampled_from(("paper", "released"))), qkv_bias=draw(st.booleans()))
        ffn = MLP(ratio=2.0, layer_scale=draw(st.one_of(st.none(), st.just(0.5))))
        # Refined-ViT's adjusted block (x + 2 f(LN(x / 2))) or the plain pre-norm one
        out.append(AdjustedBlock(attention=attention, ffn=ffn) if draw(st.booleans()) else
                   Block(attention=attention, ffn=ffn))
    return tuple(out)


KIND_MODELS = {
    RefinerAttention: st.one_of(
        refiner_stacks(16, 3, (4, 4)).map(lambda b: isotropic_model(block=b, depth=3)),
        st.tuples(st.builds(Refine, expansion=st.integers(1, 2), kernel=st.sampled_from([0, 1, 3]),
                            constraint=st.sampled_from(["none", "row_col"])), st.booleans())
        .map(lambda t: text_model(block=PostNormBlock(attention=RefinerAttention(heads=2, refine=t[0])),
                                  causal=t[1], head=LastTokenHead() if t[1] else FirstTokenHead(pooler="tanh"))),
        refiner_stacks(16, 2, (2, 2)).map(lambda b: hierarchical_model(Block(), stages=[
            Stage(depth=2, dim=16, block=b), Stage(depth=2, dim=32, block=b, entry=PatchMerging())]))),
    AdjustedBlock: st.one_of(
        refiner_stacks(16, 3, (4, 4)).filter(lambda b: any(isinstance(x, AdjustedBlock) for x in b))
        .map(lambda b: isotropic_model(block=b, depth=3)),
        st.builds(AdjustedBlock, attention=attentions(16), adjust_ratio=st.sampled_from([0.5, 2.0]))
        .map(lambda b: isotropic_model(block=b))),
}

KIND_RULES = {
    RefinerAttention: lambda spec: [  # on text: the released DLA's BatchNorms, a grid, a kernel above 8 tokens
        ([("block.attention.refine", {"form": "released"})], "block.attention.refine.form"),
        ([("block.attention.refine", {"constraint": "spatial"})], "block.attention.refine.constraint"),
        ([("block.attention.refine", {"kernel": spec.embedder.seq_len + 1})], "block.attention.refine.kernel")]
    if spec.embedder.text else [  # maps handed on within a stage, as many as the taker's heads
        ([("block.0.attention.reuse", True), ("block.0.attention.add_incoming", False)], "block.0.attention"),
        ([("block.0.attention", {"kind": "mhsa", "heads": 2}), ("block.1.attention.reuse", True),
          ("block.1.attention.add_incoming", False)], "block.1.attention"),
        ([("block.1.attention.reuse", True), ("block.1.attention.add_incoming", True)],
         "block.1.attention.add_incoming"),
        ([("block.0.attention.refine", {"expansion": 2, "reduction": False, "kernel": 0}),
          ("block.1.attention.reuse", True), ("block.1.attention.add_incoming", False)], "block.1.attention"),
        ([("block.0.attention.refine", {"kernel": 18})], "block.0.attention.refine.kernel"),  # 17 tokens
        ([("block.0.attention.refine", {"kernel": 5, "constraint": "spatial"})],  # a 4 x 4 grid
         "block.0.attention.refine.kernel"),
        ([("block.0.attention.refine", {"form": "released", "reduction": False})], "block.0.attention.refine.form"),
        ([("block.0.attention.projections", {"groups": 2})], "block.0.attention.projections"),
        ([("block.0.attention.heads", 3), ("block.0.attention.head_dim", None)], "block.0.attention.heads"),
        (SINGLE_TOKEN, "block.0.attention")]  # a 1x1 grid, no class token: 1 token, nothing to attend
    if spec.isotropic else [([("stages.0.block.0.attention.reuse", True)], "stages.0.block.0.attention"),
                            ([("img_size", 8)], "stages.1.block.0.attention")],  # a 1x1 grid after the merging
    AdjustedBlock: lambda spec: (
        [([(f"block.{i}.adjust_ratio", 0.0)], f"block.{i}.adjust_ratio") for i, b in enumerate(spec.block)
         if isinstance(b, AdjustedBlock)][:1] if isinstance(spec.block, tuple) else
        [([("block.adjust_ratio", 0.0)], "block.adjust_ratio"), ([("block.adjust_ratio", -0.5)],
                                                               "block.adjust_ratio")]),
}
