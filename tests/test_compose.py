"""Random compositions of every component kind (ViT, SoT, DHVT): each builds, runs, back-propagates
to every parameter, round-trips through JSON and TOML, and profiles with every op counted."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import vspec
from vspec.spec import (
    DAFF,
    EPN,
    GCP,
    MHSA,
    MLP,
    SOPE,
    Block,
    ClassTokenHead,
    GAPHead,
    GAPPool,
    HeadTokens,
    LearnableScale,
    MGCrP,
    Model,
    NoNorm,
    Norm,
    PatchEmbed,
    ReprLayerNorm,
    SecondOrderHead,
    SimplePatchEmbed,
    SoTEmbed,
    SvPN,
)


@st.composite
def composed_models(draw):
    embedder = draw(st.one_of(
        st.builds(PatchEmbed, patch_size=st.sampled_from([4, 8])),
        st.builds(SimplePatchEmbed, patch_size=st.sampled_from([4, 8])),
        st.builds(SOPE, patch_size=st.sampled_from([2, 4, 8]), pre_affine=st.booleans(), post_affine=st.booleans(),
                  norm=st.sampled_from(["batchnorm", "layernorm"]), act=st.sampled_from(["released", "every"])),
        st.builds(SoTEmbed, block=st.sampled_from(["dense", "resnet", "inception", "nonlocal"]), stem_dim=st.just(16),
                  downsample_last=st.booleans()),
    ))
    heads = draw(st.sampled_from([2, 4]))
    ffn = draw(st.one_of(
        st.builds(MLP, ratio=st.sampled_from([1.0, 2.0])),
        st.builds(DAFF, ratio=st.sampled_from([1.0, 2.0]), spatial=st.sampled_from(["dwconv", "avgpool", "none"]),
                  shortcut=st.booleans(), cls=st.sampled_from(["reweight", "identity", "all"]),
                  norm=st.sampled_from(["batchnorm", "layernorm", "none"])),
    ))
    block = Block(attention=MHSA(heads=heads, qkv_bias=draw(st.booleans())), ffn=ffn,
                  head_tokens=draw(st.one_of(st.none(), st.just(HeadTokens()))),
                  layer_scale=draw(st.one_of(st.none(), st.just(0.1))))
    class_token = draw(st.booleans())
    pool_norm = draw(st.sampled_from([
        (MGCrP(heads=2, m=3, n=4), SvPN()), (MGCrP(heads=1, m=3, n=3), SvPN(method="exact")),
        (MGCrP(heads=2, m=3, n=3, centering="channel"), EPN()), (GAPPool(), ReprLayerNorm()),
        (GCP(dim=6, iters=3), NoNorm()), (GAPPool(), LearnableScale()),
    ]))
    fusions = ["sum", "concat", "aggr_all", "late"] if class_token else ["aggr_all"]
    heads_ = [st.builds(GAPHead, norm=st.one_of(st.none(), st.just(Norm())))]
    heads_.append(st.builds(SecondOrderHead, fusion=st.sampled_from(fusions), pool=st.just(pool_norm[0]),
                            norm=st.just(pool_norm[1])))
    if class_token:
        heads_.append(st.just(ClassTokenHead()))
    side = 16 if isinstance(embedder, SoTEmbed) and embedder.downsample_last else 8
    return Model(embedder=embedder, block=block, depth=draw(st.integers(1, 2)), dim=32, num_classes=3,
                 img_size=(side * draw(st.integers(1, 2)), side * draw(st.integers(1, 2))), class_token=class_token,
                 pos_embed=draw(st.sampled_from(["none", "learned", "sincos1d", "sincos2d"])),
                 head=draw(st.one_of(*heads_)), drop_path=draw(st.sampled_from([0.0, 0.1])))


@settings(max_examples=20)
@given(spec=composed_models(), seed=st.integers(0, 1000))
def test_any_composition_builds_trains_and_profiles(spec, seed):
    assert vspec.from_json(vspec.to_json(spec)) == spec
    assert vspec.from_toml(vspec.to_toml(spec)) == spec
    torch.manual_seed(seed)
    model = vspec.build(spec).train()
    out = model(torch.randn(2, 3, *spec.img_size))
    outs = out if isinstance(out, tuple) else (out,)
    assert all(o.shape == (2, 3) and torch.isfinite(o).all() for o in outs)
    sum(o.square().mean() for o in outs).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    model.eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, *spec.img_size)).shape == (1, 3)
    prof = vspec.profile(spec)
    assert prof.params == sum(p.numel() for p in model.parameters())
    assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs
