"""Random compositions of every component kind (`composed_models`, a Hypothesis strategy) and the test of a
draft that is no degenerate model (`nondegenerate`): tests/nn/test_compose.py and the fuzzer `fuzz_compose`."""

from hypothesis import assume
from hypothesis import strategies as st

from tests.helpers.strategies import single_token_path
from vspec.spec import (
    DAFF,
    EPN,
    GCP,
    MHSA,
    MLP,
    SOPE,
    Block,
    ClassTokenHead,
    DenseAux,
    GAPHead,
    GAPPool,
    HeadTokenBlock,
    LearnableScale,
    MGCrP,
    Model,
    NoNorm,
    Norm,
    PatchEmbed,
    PatchMerging,
    ReprLayerNorm,
    SecondOrderHead,
    SimplePatchEmbed,
    SoTEmbed,
    Stage,
    SvPN,
    WindowMHSA,
)


@st.composite
def composed_models(draw):
    hierarchical = draw(st.booleans())
    class_token = not hierarchical and draw(st.booleans())
    embedder = draw(st.one_of(
        st.builds(PatchEmbed, patch_size=st.sampled_from([4, 8]), norm=st.sampled_from([None, *NORMS])),
        st.builds(SimplePatchEmbed, patch_size=st.sampled_from([4, 8])),
        st.builds(SOPE, patch_size=st.sampled_from([2, 4, 8]), pre_affine=st.booleans(), post_affine=st.booleans(),
                  norm=st.sampled_from(NORMS), act=st.sampled_from(["released", "every"])),
        st.builds(SoTEmbed, block=st.sampled_from(["dense", "resnet", "inception", "nonlocal"]), stem_dim=st.just(16),
                  downsample_last=st.booleans()),
    ))
    heads = draw(st.sampled_from([2, 4]))
    ffn = draw(st.one_of(
        st.builds(MLP, ratio=st.sampled_from([1.0, 2.0])),
        st.builds(DAFF, ratio=st.sampled_from([1.0, 2.0]), spatial=st.sampled_from(["dwconv", "avgpool", "none"]),
                  shortcut=st.booleans(), cls=st.sampled_from(["reweight", "identity", "all"] if class_token
                                                              else ["identity", "all"]),
                  norm=st.sampled_from(NORMS)),
    ))
    windowed = hierarchical and draw(st.booleans())
    attention = WindowMHSA(heads=heads, window=draw(st.sampled_from([1, 2, 4]))) if windowed else \
        MHSA(heads=heads, qkv_bias=draw(st.booleans()))
    head_tokens = not windowed and draw(st.booleans())
    block = (HeadTokenBlock if head_tokens else Block)(attention=attention, ffn=ffn,
                                                       norm=draw(st.sampled_from(NORMS[:2])),
                                                       layer_scale=draw(st.one_of(st.none(), st.just(0.1))))
    pool_norm = draw(st.sampled_from([
        (MGCrP(heads=2, m=3, n=4), SvPN()), (MGCrP(heads=1, m=3, n=3), SvPN(method="exact")),
        (MGCrP(heads=2, m=3, n=3, centering="channel"), EPN()), (GAPPool(), ReprLayerNorm()),
        (GCP(dim=6, iters=3), NoNorm()), (GAPPool(), LearnableScale()),
    ]))
    fusions = ["sum", "concat", "aggr_all", "late"]
    fusion = draw(st.sampled_from(fusions))
    z0 = None if class_token or fusion == "aggr_all" else "mean_token"
    heads_ = [st.builds(GAPHead, norm=st.one_of(st.none(), st.sampled_from(NORMS))),
              st.just(SecondOrderHead(fusion=fusion, pool=pool_norm[0], norm=pool_norm[1], z0=z0))]
    if class_token:
        heads_.append(st.builds(ClassTokenHead, dense=st.one_of(st.none(), st.just(DenseAux()))))
    # grids down to 1 x 1 (no class token: attention over one token, refused; single_token_path says where)
    side = embedder.patch_size * draw(st.sampled_from([1, 2]))
    scale = draw(st.integers(1, 2))
    if hierarchical:  # two stages, the second after a patch merging: a grid of 4 x 4 or 2 x 2, then halved
        side, scale = embedder.patch_size * draw(st.sampled_from([2, 4])), 1
        stages = [Stage(depth=1, dim=32, block=block),
                  Stage(depth=draw(st.integers(1, 2)), dim=48, block=Block(attention=attention, ffn=ffn),
                        entry=PatchMerging(norm=draw(st.sampled_from(NORMS))))]
        body = dict(stages=stages)
    else:
        body = dict(block=block, depth=draw(st.integers(1, 2)), dim=32)
    centred = isinstance(pool_norm[0], GCP) or getattr(pool_norm[0], "centering", "") == "channel"
    # a channel-centred covariance of every token cannot see a vector added to all of them (the final
    # norm's bias, the last block's output biases): with aggr_all nothing else reads them, and their
    # gradients are rightly zero (README, SoT section)
    assume(not (fusion == "aggr_all" and centred))
    # likewise a last DAFF that leaves the class token as it is, before a head that reads only that token
    # (DHVT's Table 8 "Split CLS" row, expressible on purpose)
    split_cls_row = isinstance(ffn, DAFF) and ffn.cls == "identity" and not hierarchical
    head = draw(st.one_of(*heads_))
    assume(not (split_cls_row and isinstance(head, ClassTokenHead)))
    # and the two together: such a DAFF's output biases reach the word tokens only, as one vector added to
    # all of them, which a per-channel final norm passes on and a channel-centred word path cannot see, while
    # the class path never receives them
    assume(not (split_cls_row and class_token and block.norm.kind == "batchnorm" and centred
                and isinstance(head, SecondOrderHead)))
    fields = dict(embedder=embedder, **body, num_classes=3, img_size=(side * scale, side * draw(st.integers(1, 2))),
                  class_token=class_token, head=head, pos_embed=draw(st.sampled_from(["none", "learned", "sincos1d",
                                                                                       "sincos2d"])),
                  drop_path=draw(st.sampled_from([0.0, 0.1])))
    return fields, single_token_path(fields)


def nondegenerate(spec: Model) -> bool:
    """No parameter of the spec is dead by construction: widths of at least 8, FFN hidden widths too (a
    single ReLU unit can be off for the whole batch), patches of at least 4 values (a LayerNorm over 1 or 2
    channels is constant), heads of at least 2 channels. (Attention over one token, whose softmax is
    constant, is refused by the spec: valid_models never draws it.)"""
    p = spec.embedder.patch_size
    if spec.in_chans * p * p < 4:
        return False
    for stage in spec.stages:
        if stage.dim < 8:
            return False
        for b in stage.blocks:
            if hasattr(b.ffn, "hidden_dim") and b.ffn.hidden_dim(stage.dim) < 8:
                return False
            a = b.attention
            if (a.head_dim or stage.dim // a.heads) < 2:
                return False
    return True


NORMS = [Norm("batchnorm", 1e-5), Norm("layernorm", 1e-5), Norm("none")]
