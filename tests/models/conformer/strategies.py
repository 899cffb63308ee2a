"""Hypothesis strategies for Conformer's kinds (found by tests/helpers/strategies.py as the family is): `KIND_MODELS`,
small models using each kind with its options drawn; `KIND_RULES`, the rules tying each kind to the rest of a model
that a change of its fields breaks; `conformer_model`, a Conformer shrunk."""

from hypothesis import strategies as st

from tests.helpers.strategies import drops, embedder_rules, norms, small_floats
from vspec.spec import (
    MHSA,
    Block,
    ClassTokenHead,
    ConformerHead,
    ConformerStem,
    ConvBranch,
    CoupledBlock,
    GAPHead,
    MGCrP,
    Model,
    Norm,
    SecondOrderHead,
    Stage,
    SvPN,
)


def conformer_model(embedder: ConformerStem | None = None, block: Block | None = None, med_blocks: int = 0,
                    last_stride: int = 2, **changes) -> Model:
    """A Conformer shrunk (the released depth-3 layout, `conformer_d3.pt`): 32 px, patch 16 (2x2 tokens of width
    16), the stem's 8x8 map; a plain block, then two coupled blocks (widths 16, 32, each halving the map)."""
    block = block or Block(attention=MHSA(heads=2))
    embedder = embedder or ConformerStem(stem=8, width=8)
    branches = [ConvBranch(width=16, stride=2, down=2, med_blocks=med_blocks),
                ConvBranch(width=32, stride=2, down=1, fusion_stride=last_stride, med_blocks=med_blocks)]
    stages = [Stage(depth=1, dim=16, block=block)] + [Stage(depth=1, dim=16, block=CoupledBlock(
        attention=block.attention, ffn=block.ffn, norm=block.norm, layer_scale=block.layer_scale, conv=b))
        for b in branches]
    base = dict(embedder=embedder, stages=stages, num_classes=3, img_size=32, pos_embed="none", final_norm=False,
                head=ConformerHead())
    return Model(**{**base, **changes})


def conformer_heads() -> st.SearchStrategy[ConformerHead]:
    """The conformer head over a token head: the class token's, the patch tokens' mean, or SoT's."""
    mgcrp = st.builds(MGCrP, heads=st.integers(1, 2), m=st.integers(2, 4), n=st.integers(2, 4))
    tokens = st.one_of(st.builds(ClassTokenHead, drop=drops()), st.builds(GAPHead, norm=st.one_of(st.none(), norms())),
                       st.builds(SecondOrderHead, fusion=st.sampled_from(["sum", "concat"]), pool=mgcrp,
                                 norm=st.just(SvPN())))
    return st.builds(ConformerHead, tokens=tokens, norm=st.builds(Norm, eps=small_floats(1e-6, 1e-4)))


KIND_MODELS = {
    ConformerStem: st.tuples(st.builds(ConformerStem, patch_size=st.just(16), stem=st.sampled_from([4, 8]),
                                       width=st.sampled_from([4, 8])), st.integers(0, 1), st.sampled_from([1, 2]))
    .map(lambda t: conformer_model(embedder=t[0], med_blocks=t[1], last_stride=t[2])),
    ConformerHead: conformer_heads().map(lambda h: conformer_model(head=h)),
    CoupledBlock: st.integers(0, 1).map(lambda m: conformer_model(med_blocks=m)),
}

KIND_RULES = {
    ConformerStem: lambda spec: embedder_rules(spec) + [  # a map at stride 4; the map must reach a head that reads it
        ([("embedder.patch_size", 6), ("img_size", 36)], "embedder.patch_size"),
        ([("embedder.width", 6)], "embedder.width"),
        ([("head", {"kind": "class_token"})], "head"),
        ([("stages.1.block.conv.down", 1)], "stages.1.block.conv.down")],
    ConformerHead: lambda spec: [  # a CNN map only after a two-branch embedder (refused at its first reader, the
        # first coupled block); a token head reads tokens only
        ([("embedder", {"kind": "patch", "patch_size": 16})], "stages.1.block"),
        ([("head.tokens", {"kind": "conformer"})], "head.tokens"),
        ([("class_token", False)], "stages.1.block.conv")],
    CoupledBlock: lambda spec: [  # the pooled map must be the token grid; a class token for FCUDown; a map
        ([("stages.1.block.conv.down", 1)], "stages.1.block.conv.down"),
        ([("class_token", False)], "stages.1.block.conv"),
        ([("embedder", {"kind": "patch", "patch_size": 16}), ("head", {"kind": "class_token"})], "stages.1.block")],
}
