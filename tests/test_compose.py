"""Random compositions of every component kind (ViT, SoT, DHVT, Swin parts) on one-stage and
hierarchical bodies: each builds, runs, back-propagates a nonzero gradient to every parameter,
round-trips through JSON and TOML, and profiles with every op counted. What cannot compose is
rejected at spec time with a SpecError naming the field."""

import pytest
import torch
from conftest import assert_every_parameter_learns
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from strategies import single_token_path

import vspec
from vspec.nn.heads import as_outputs
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
    SpecError,
    Stage,
    SvPN,
    WindowMHSA,
)

NORMS = [Norm("batchnorm", 1e-5), Norm("layernorm", 1e-5), Norm("none")]


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


def composed(fields: dict, single_token: str | None) -> Model | None:
    """The model, or None when the spec refuses it as it must: attention over one token (naming the
    attention, or the nonlocal embedder), a second-order pool over one token (tests/test_sot.py), a DAFF
    re-weighting the class token for a head that never reads it (tests/test_dhvt.py)."""
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
    model = vspec.build(spec).train()
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


SWIN = vspec.load_spec(__file__.replace("tests/test_compose.py", "specs/swin_tiny.py"))


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
    model = vspec.build(spec).train()
    x, y = torch.randn(2, 3, 64, 64), torch.tensor([1, 7])
    words = model.forward_features(x)
    assert torch.allclose(model.head.first_order(words), words.mean(dim=1))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    assert_every_parameter_learns(model)
