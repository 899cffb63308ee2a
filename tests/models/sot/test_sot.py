"""SoT: released checkpoints reproduced, released sizes, the head's fusion algebra, composition."""

import warnings
from pathlib import Path

import attrs
import pytest
import torch

import vspec
import vspec.models.sot.convert
from tests.helpers.checks import FIXTURES, argument_cases, assert_close_to_stored, check_argument
from tests.helpers.docs_examples import doc
from vspec.convert import ConversionError, from_official
from vspec.nn.head_outputs import as_outputs, head_loss
from vspec.spec import (
    EPN,
    GCP,
    GAPPool,
    LearnableScale,
    MGCrP,
    NoNorm,
    ReprLayerNorm,
    SecondOrderHead,
    SoTEmbed,
    SpecError,
    SvPN,
)

ROOT = Path(__file__).resolve().parents[3]
SOT_FIXTURES = ["sot_densenet_sum_fc", "sot_resnet_concat", "sot_inception_aggre_all", "sot_densenet_sum_loss",
                "sot_7layer_densenet_112", "sot_7layer_resnet_112", "sot_7layer_inception_112", "sot_densenet_timm034",
                "sot_qkscale_largeout"]

# released code: trainable parameters (M) and MACs of conv + linear layers (G, the paper's convention)
RELEASED = {"sot_tiny": (7.990, 2.529), "sot_small": (27.017, 5.797), "sot_base": (76.781, 14.539)}


def fixture(name):
    return torch.load(FIXTURES / f"{name}.pt", weights_only=True)


@pytest.mark.parametrize("name", SOT_FIXTURES)
def test_released_checkpoints_reproduced(name):
    data = fixture(name)
    with warnings.catch_warnings(record=True) as notes:
        warnings.simplefilter("always")
        model = from_official("sot", data["state_dict"], data["config"]).eval()
    unused = data["config"]["fusion_type"] in ("concat", "aggre_all")  # their class-token classifier
    assert [type(n.message) for n in notes] == [vspec.convert.ConversionNote] * unused
    with torch.no_grad():
        if isinstance(data["y"], list):  # late fusion: [class-token logits, word-token logits]
            cls, word = model.head.branches(model.forward_features(data["x"]))
            assert_close_to_stored(cls, data["y"][0])
            assert_close_to_stored(word, data["y"][1])
            assert_close_to_stored(model(data["x"]), data["y"][0] + data["y"][1])
        else:
            assert_close_to_stored(model(data["x"]), data["y"])


def test_released_options_are_honoured():
    """What each of the newer fixtures exercises shows in the converted model."""
    for name in ("sot_7layer_densenet_112", "sot_7layer_resnet_112", "sot_7layer_inception_112"):
        data = fixture(name)
        spec = vspec.models.sot.convert.SOT.spec_of(data["config"], data["state_dict"])
        assert spec.img_size == (112, 112) and spec.embedder.downsample_last is False and spec.grid == (14, 14)
    data = fixture("sot_7layer_resnet_112")
    resnet = from_official("sot", data["state_dict"], data["config"])
    assert [type(b.downsample).__name__ for b in resnet.embedder.stage] == ["Sequential", "Sequential", "Identity"]
    old = fixture("sot_densenet_timm034")
    assert old["config"]["timm_version"] == "0.3.4"
    spec = vspec.models.sot.convert.SOT.spec_of(old["config"], old["state_dict"])
    assert spec.embedder.dense_norm == vspec.Norm(kind="none")
    # by timm_version
    assert vspec.models.sot.convert.SOT.spec_of(old["config"]).embedder.dense_norm.kind == "none"
    data = fixture("sot_qkscale_largeout")
    spec = vspec.models.sot.convert.SOT.spec_of(data["config"], data["state_dict"])
    assert spec.block.attention.scale == 0.0625 and spec.embedder.large_output
    assert spec.grid == (56, 56) and vspec.layout(spec)[0].tokens.length == 3136 + 1


def test_unused_class_token_classifier_is_reported():
    """concat / aggre_all: the released model builds cls_fc and never uses it; vspec leaves it out and
    says so (SoT-Tiny at 1000 classes: 241,000 parameters)."""
    data = fixture("sot_resnet_concat")
    with pytest.warns(vspec.convert.ConversionNote, match=r"classifier.cls_fc \(490 parameters\) .* never used"):
        from_official("sot", data["state_dict"], data["config"])
    tiny = vspec.load_spec(ROOT / "specs/sot_tiny.py")
    assert tiny.dim * 1000 + 1000 == 241_000 and "241,000 parameters in SoT-Tiny" in doc("families/sot")


@pytest.mark.parametrize("changes,needle", [
    ({"img_size": 160}, "img_size 160: the released SoT hard-codes a 14 x 14 token grid .* gives 20 x 20 tokens; "
                        "it builds at 112 and 224 px only"),
    ({"img_size": 112, "large_output": True}, "builds at 224 px only"),
    ({"token_type": "ResNet", "large_output": True}, "large_output with ResNet"),
    ({"token_type": "Non-local"}, "token_type 'Non-local'"),
    ({"token_type": "VGG"}, "token_type 'VGG'"),
    ({"drop_rate": 0.1}, "drop_rate 0.1"),
    ({"patch_size": 16}, "unknown argument 'patch_size'"),
    ({"svpn": {"alpha": 0.5, "beta": 1}}, "unknown argument 'svpn.beta'"),
])
def test_what_the_released_code_cannot_build_or_vspec_does_not_convert_is_one_line(changes, needle):
    data = fixture("sot_densenet_sum_fc")
    with pytest.raises(ConversionError, match=needle) as info:
        from_official("sot", data["state_dict"], {**flat(data["config"]), **changes})
    assert "\n" not in str(info.value)


def flat(config):
    """A fixture's configuration without its constructor snapshot (the flat arguments alone)."""
    return {k: v for k, v in config.items() if k != "cfg_snapshot"}


def test_the_snapshot_and_the_flat_arguments_must_agree():
    data = fixture("sot_densenet_sum_fc")
    with pytest.raises(ConversionError, match=r"^SoT config: qk_scale is 0.1 but cfg_snapshot.ViTConfig.qk_scale is "
                                              r"None$"):
        from_official("sot", data["state_dict"], {**data["config"], "qk_scale": 0.1})


@pytest.mark.parametrize("snapshot,needle", [
    ({"representationConfig": {"type": "GCP"}}, "representation 'GCP'"),
    ({"representationConfig": {"args": {"normalization": {"type": "ePN"}}}}, "normalization 'ePN'"),
    ({"ViTConfig": {"act_layer": "<class 'torch.nn.modules.activation.ReLU'>"}}, "act_layer"),
    ({"ViTConfig": {"window": 7}}, "unknown argument 'cfg_snapshot.ViTConfig.window'"),
])
def test_snapshot_arguments_are_honoured_or_rejected_by_name(snapshot, needle):
    data = fixture("sot_densenet_sum_fc")
    with pytest.raises(ConversionError, match=needle):
        from_official("sot", data["state_dict"], {**flat(data["config"]), "cfg_snapshot": snapshot})



# SoT.__init__'s arguments (jiangtaoxie/SoT @ 5da3c37, sot_src/sot.py) under the converter's flat names: img_size,
# in_chans, num_classes, drop_rate, drop_path_rate, norm_layer, and the fields of its visualTokenConfig, ViTConfig and
# representationConfig dicts (`SOT.aliases` names each), plus timm_version (which timm built it)
SOT_CONSTRUCTOR = (
    "token_type", "fusion_type", "embed_dim", "depth", "num_heads", "mlp_ratio", "mgcrp_heads", "wr_dim", "svpn.alpha",
    "svpn.iterNum", "svpn.svNum", "img_size", "in_chans", "num_classes", "qkv_bias", "qk_scale", "attn_drop",
    "drop_rate", "drop_path_rate", "token_dim", "large_output", "dropout", "norm_layer", "act_layer", "representation",
    "representation_dim", "wr_bias", "normalization", "svpn_input_dim", "timm_version",
)


def sot_base():
    return flat(fixture("sot_densenet_sum_fc")["config"])  # DenseNet, sum_fc, dim 48, 2 blocks of 4 heads, m = 6


def as_sot_base(spec):
    return spec == vspec.models.sot.convert.SOT.spec_of(sot_base())


SVPN = {"alpha": 0.5, "iterNum": 1, "svNum": 1}
# argument -> [(changes to the fixture's flat config, the converted spec's expected property or the refusal's text)]
SOT_CASES = {
    "token_type": [({"token_type": "ResNet"}, lambda s: s.embedder.block == "resnet"),
                   ({"token_type": "Non-local"}, r"token_type 'Non-local': the released non-local embedding")],
    "fusion_type": [({"fusion_type": "concat"}, lambda s: s.head.fusion == "concat"),
                    ({"fusion_type": "max"}, r"fusion_type 'max'; known: sum_fc, concat, aggre_all, sum_loss")],
    "embed_dim": [({"embed_dim": 96}, lambda s: s.dim == 96)],
    "depth": [({"depth": 3}, lambda s: s.depth == 3)],
    "num_heads": [({"num_heads": 2}, lambda s: s.block.attention.heads == 2)],
    "mlp_ratio": [({"mlp_ratio": 3.0}, lambda s: s.block.ffn.hidden == 144)],
    "mgcrp_heads": [({"mgcrp_heads": 3}, lambda s: s.head.pool.heads == 3)],
    "wr_dim": [({"wr_dim": 8}, lambda s: (s.head.pool.m, s.head.pool.n) == (8, 8))],
    "svpn.alpha": [({"svpn": {**SVPN, "alpha": 0.25}}, lambda s: s.head.norm.alpha == 0.25)],
    "svpn.iterNum": [({"svpn": {**SVPN, "iterNum": 2}}, lambda s: s.head.norm.iters == 2)],
    "svpn.svNum": [({"svpn": {**SVPN, "svNum": 2}}, lambda s: s.head.norm.num_sv == 2)],
    "img_size": [({"img_size": 112}, lambda s: not s.embedder.downsample_last),
                 ({"img_size": 160}, r"img_size 160: the released SoT hard-codes a 14 x 14 token grid")],
    "in_chans": [({"in_chans": 1}, lambda s: s.in_chans == 1)],
    "num_classes": [({"num_classes": 5}, lambda s: s.num_classes == 5)],
    "qkv_bias": [({"qkv_bias": True}, lambda s: s.block.attention.qkv_bias)],
    "qk_scale": [({"qk_scale": 0.1}, lambda s: s.block.attention.scale == 0.1)],
    "attn_drop": [({"attn_drop": 0.1}, lambda s: s.block.attention.attn_drop == 0.1)],
    "drop_rate": [({"drop_rate": 0.1}, r"drop_rate 0.1: the released model also drops after the position embedding")],
    "drop_path_rate": [({"drop_path_rate": 0.1}, lambda s: s.drop_path == 0.1)],
    "token_dim": [({"token_dim": 32}, lambda s: s.embedder.stem_dim == 32)],
    "large_output": [({"large_output": True}, lambda s: s.embedder.large_output and s.grid == (56, 56))],
    "dropout": [({"dropout": 0.5}, lambda s: s.head.drop == 0.5)],
    "norm_layer": [({"norm_layer": "LayerNorm(eps=1e-6)"}, lambda s: s.block.norm.eps == 1e-6),
                   ({"norm_layer": "<class 'torch.nn.modules.normalization.LayerNorm'>"}, as_sot_base),
                   ({"norm_layer": "LayerNorm(eps=1e-6, elementwise_affine=False)"}, r"norm_layer .*: only LayerNorm")],
    "act_layer": [({"act_layer": "<class 'torch.nn.modules.activation.GELU'>"}, as_sot_base),
                  ({"act_layer": "GELU(approximate='tanh')"}, r"act_layer \"GELU\(approximate='tanh'\)\": only GELU")],
    "representation": [({"representation": "GCP"}, r"representation 'GCP': only the released models' MGCrP")],
    "representation_dim": [({"representation_dim": 48}, as_sot_base),
                           ({"representation_dim": 32}, r"MGCrP dim 32 differs from embed_dim 48")],
    "wr_bias": [({"wr_bias": True}, r"MGCrP qkv_bias=True: vspec's MGCrP projection has no bias")],
    "normalization": [({"normalization": "ePN"}, r"normalization 'ePN': only svPN is converted")],
    "svpn_input_dim": [({"svpn_input_dim": 6}, as_sot_base),
                       ({"svpn_input_dim": 7}, r"svPN input_dim 7 differs from wr_dim 6")],
    "timm_version": [({"timm_version": "0.3.4"}, lambda s: s.embedder.dense_norm.kind == "none")],
    "unknown keys": [({"pos_drop": 0.1}, r"unknown argument 'pos_drop'; the released constructor takes token_type, ")],
}


def test_the_sot_cases_cover_every_constructor_argument():
    assert tuple(vspec.models.sot.convert.SOT.arguments) == SOT_CONSTRUCTOR
    assert list(SOT_CASES) == [*SOT_CONSTRUCTOR, "unknown keys"]
    aliases = vspec.models.sot.convert.SOT.aliases.values()
    assert {a if isinstance(a, str) else a[0] for a in aliases} <= set(SOT_CONSTRUCTOR)


@pytest.mark.parametrize(**argument_cases(SOT_CASES))
def test_every_sot_argument_is_honoured_or_refused_by_name(changes, expect):
    config = {**sot_base(), **changes}
    check_argument("sot", "SoT", fixture("sot_densenet_sum_fc")["state_dict"], config, expect)


def test_naive_linear_embedding_converts():
    """Table 3a's baseline embedding: the released PatchEmbed with img_size // 14 px patches."""
    data = fixture("sot_densenet_sum_fc")
    config = {**data["config"], "token_type": "Naive_linear", "cfg_snapshot": {}}
    spec = vspec.models.sot.convert.SOT.spec_of(config)
    assert isinstance(spec.embedder, vspec.PatchEmbed) and spec.embedder.patch_size == 16 and spec.grid == (14, 14)
    torch.manual_seed(0)
    ours = vspec.build(spec).eval()
    official = {"pos_embed": vspec.ops.sincos_1d(197, 48)[None]}
    for key, value in ours.state_dict().items():  # ours renamed to the released names
        key = key.replace("embedder.", "visual_tokens.tokens.").replace(".ffn.", ".mlp.").replace("stages.0.", "")
        key = key.replace("head.pool.wr.", "classifier.representation.wr.")
        key = key.replace("head.word_fc.", "classifier.visual_fc.").replace("head.cls_fc.", "classifier.cls_fc.")
        official[key.replace("head.norm.v0", "classifier.representation.norm.weight")] = value
    model = from_official("sot", official, config).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert torch.equal(model(x), ours(x))


def test_both_dense_layouts_and_their_counts():
    """SoT-Tiny as released with timm >= 0.4 (BatchNorm in the dense layers) and with timm 0.3.4, the
    version SoT's README pins and its released weights were trained with (no BatchNorm there); the 7-layer
    DenseNet model at 112 px is specs/sot_7layer.py."""
    tiny = vspec.load_spec(ROOT / "specs/sot_tiny.py")
    assert vspec.profile(tiny).params_trainable == 7_989_982
    old = vspec.override(tiny, {"embedder.dense_norm.kind": "none"})
    assert vspec.profile(old).params_trainable == 7_983_550
    config = {"token_type": "DenseNet", "fusion_type": "sum_fc", "embed_dim": 240, "depth": 7, "num_heads": 4,
              "mlp_ratio": 2.5, "mgcrp_heads": 6, "wr_dim": 14, "img_size": 112, "num_classes": 1000}
    seven = vspec.models.sot.convert.SOT.spec_of(config)
    assert seven == vspec.load_spec(ROOT / "specs/sot_7layer.py")
    assert vspec.profile(seven).params_trainable == 5_387_782
    readme = doc("families/sot")
    assert all(f in readme for f in ("5,387,782", "7,989,982", "7,983,550", "3,136 word tokens"))


def test_dense_embedding_options_are_dense_only():
    with pytest.raises(SpecError, match="SoTEmbed.large_output: applies to the dense embedding only"):
        SoTEmbed(block="resnet", large_output=True)
    with pytest.raises(SpecError, match="SoTEmbed.dense_norm: applies to the dense embedding only"):
        SoTEmbed(block="inception", dense_norm=vspec.Norm(kind="none"))
    with pytest.raises(SpecError, match="downsample_last = false would change nothing"):
        SoTEmbed(large_output=True, downsample_last=False)
    assert SoTEmbed(large_output=True).patch_size == 4 and SoTEmbed(downsample_last=False).patch_size == 8


def test_converter_rejects_a_wrong_config():
    data = fixture("sot_densenet_sum_fc")
    with pytest.raises(ConversionError, match="does not fit"):
        from_official("sot", data["state_dict"], {**flat(data["config"]), "wr_dim": 7})
    with pytest.raises(ConversionError, match="token_type"):
        from_official("sot", data["state_dict"], {**flat(data["config"]), "token_type": "VGG"})
    with pytest.raises(ConversionError, match="unknown family"):
        from_official("sott", data["state_dict"], data["config"])


@pytest.mark.parametrize("size", ["tiny", "small", "base"])
def test_full_size_configurations_convert(size):
    """The same key mapping at full size: a released-layout state dict of the full model loads."""
    spec = vspec.load_spec(ROOT / f"specs/sot_{size}.py")
    config = {"token_type": "DenseNet", "fusion_type": "sum_fc", "embed_dim": spec.dim, "depth": spec.depth,
              "num_heads": spec.block.attention.heads, "mlp_ratio": spec.block.ffn.hidden / spec.dim,
              "mgcrp_heads": spec.head.pool.heads, "wr_dim": spec.head.pool.m,
              "svpn": {"alpha": 0.5, "iterNum": 1, "svNum": 1}, "img_size": 224, "num_classes": 1000}
    assert vspec.spec.from_dict({**vspec.to_dict(spec), "head": {**vspec.to_dict(spec.head), "drop": 0.0}}) == \
        vspec.models.sot.convert.SOT.spec_of(config)
    ours = vspec.build(spec, device="meta")
    official = {}  # ours renamed to the released names, as the released model's state_dict() reads
    for key, value in ours.state_dict().items():
        key = key.replace("embedder.", "visual_tokens.tokens.").replace(".ffn.", ".mlp.").replace("stages.0.", "")
        key = key.replace("head.pool.wr.", "classifier.representation.wr.")
        key = key.replace("head.norm.v0", "classifier.representation.norm.weight")
        key = key.replace("head.word_fc.", "classifier.visual_fc.").replace("head.cls_fc.", "classifier.cls_fc.")
        official[key] = torch.zeros(value.shape)
    official["pos_embed"] = vspec.ops.sincos_1d(197, spec.dim)[None]
    model = from_official("sot", official, config)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ours.parameters())


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_released_sizes(name):
    params, conv_linear = RELEASED[name]
    prof = vspec.profile(vspec.load_spec(ROOT / f"specs/{name}.py"))
    assert abs(prof.params_trainable / 1e6 - params) / params < 0.001
    assert abs(prof.conventions["conv_linear"] / 1e9 - conv_linear) / conv_linear < 0.01
    assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs


def test_deit_tiny_sot_table_5a():
    prof = vspec.profile(vspec.load_spec(ROOT / "specs/deit_tiny_sot.py"))
    assert abs(prof.params_trainable / 1e6 - 7.0) < 0.1  # Table 5a: 7.0 M
    assert abs(prof.conventions["conv_linear"] / 1e9 - 2.3) < 0.1  # Table 5a: 2.3 G


def test_seven_layer_model_grid():
    spec = vspec.load_spec(ROOT / "specs/sot_7layer.py")
    model = vspec.build(spec).eval()
    assert spec.img_size == (112, 112) and spec.grid == (14, 14)
    with torch.no_grad():
        assert model.forward_features(torch.randn(1, 3, 112, 112)).shape == (1, 197, 240)


def small(**head_changes):
    """A small ViT body (32 px, 8 px patches, 2 blocks of 192, 5 classes) with the SoT head."""
    body = vspec.override(vspec.load_spec(ROOT / "specs/deit_tiny.py"),
                          {"img_size": 32, "depth": 2, "num_classes": 5, "embedder.patch_size": 8})
    return attrs.evolve(body, head=attrs.evolve(SecondOrderHead(pool=MGCrP(heads=2, m=4, n=3)), **head_changes))


def test_sum_fusion_with_zero_word_classifier_is_the_class_token_head():
    torch.manual_seed(0)
    sot = vspec.build(small(fusion="sum")).eval()
    with torch.no_grad():
        sot.head.word_fc.weight.zero_()
        sot.head.word_fc.bias.zero_()
    plain_spec = attrs.evolve(sot.spec, head=vspec.ClassTokenHead())
    plain = vspec.build(plain_spec).eval()
    state = {k: v for k, v in sot.state_dict().items() if not k.startswith("head.")}
    state |= {"head.fc.weight": sot.head.cls_fc.weight, "head.fc.bias": sot.head.cls_fc.bias}
    plain.load_state_dict(state)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(sot(x), plain(x), atol=1e-6)


def test_late_fusion_pair_in_training_sum_in_eval():
    torch.manual_seed(0)
    model = vspec.build(small(fusion="late"))
    x = torch.randn(2, 3, 32, 32)
    model.train().set_training_outputs(True)
    out = model(x)
    assert [(o.name, o.target, o.weight) for o in out] == [("cls", "sample", 1.0), ("word", "sample", 1.0)]
    assert all(o.logits.shape == (2, 5) for o in out)
    y, ce = torch.tensor([0, 1]), torch.nn.functional.cross_entropy
    loss = head_loss(ce, out, y)
    assert torch.allclose(loss, ce(out[0].logits, y) + ce(out[1].logits, y))  # late fusion: the sum of the two
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    model.eval()
    with torch.no_grad():
        cls, word = model.head.branches(model.forward_features(x))
        assert torch.allclose(model(x), cls + word, atol=1e-6)


def test_concat_and_aggr_all_use_the_documented_inputs():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 32, 32)
    for fusion, width in (("concat", 192 + 24), ("aggr_all", 24)):
        model = vspec.build(small(fusion=fusion)).eval()
        with torch.no_grad():
            feats = model.forward_features(x)
            pre = model.forward_head(feats, pre_logits=True)
            assert pre.shape == (2, width)
            if fusion == "concat":
                assert torch.equal(pre[:, :192], feats[:, 0])
            assert torch.allclose(model(x), model.head.fc(pre), atol=1e-6)


@pytest.mark.parametrize("pool,norm", [
    (GAPPool(), NoNorm()), (GAPPool(), EPN()), (GAPPool(), ReprLayerNorm()), (GCP(dim=8, iters=3), NoNorm()),
    (MGCrP(heads=2, m=4, n=3), SvPN(method="exact")),
    (MGCrP(heads=2, m=4, n=4), SvPN(num_sv=2, iters=3, start="fixed")),
    (MGCrP(heads=1, m=3, n=5, centering="channel"), LearnableScale(init=0.5)), (MGCrP(centering="none"), EPN()),
])
@pytest.mark.parametrize("fusion", ["sum", "concat", "aggr_all", "late"])
def test_every_pool_norm_fusion_trains_one_step(pool, norm, fusion):
    torch.manual_seed(0)
    spec = small(fusion=fusion, pool=pool, norm=norm, drop=0.1)
    model = vspec.build(spec).train().set_training_outputs(True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = model(torch.randn(4, 3, 32, 32))
    loss = head_loss(torch.nn.functional.cross_entropy, out, torch.tensor([0, 1, 2, 3]))
    assert len(as_outputs(out)) == (2 if fusion == "late" else 1)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    opt.step()
    prof = vspec.profile(spec)
    assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs
    assert prof.params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("fusion", ["sum", "aggr_all"])
def test_second_order_pools_need_two_tokens(fusion):
    """One word token: its (cross-)covariance is zero when centred and rank one otherwise (the power
    iteration's start is then orthogonal to Q); GAP on one token is fine."""
    spec = vspec.load_spec(ROOT / "specs/sot_7layer.py")
    with pytest.raises(SpecError, match="at least 2 word tokens") as info:
        # (with the class token: without it the one token would already be refused by the attention)
        vspec.override(spec, {"img_size": 8, "embedder.kind": "patch", "embedder.patch_size": 8, "head.fusion": fusion})
    assert info.value.path == "head.pool"
    vspec.override(spec, {"img_size": 8, "embedder.kind": "patch", "embedder.patch_size": 8,
                          "head.pool.kind": "gap_pool", "head.norm.kind": "no_norm"})


def test_head_validation():
    with pytest.raises(SpecError, match="needs the mgcrp pool"):
        SecondOrderHead(pool=GAPPool())
    with pytest.raises(SpecError, match="num_sv"):
        SecondOrderHead(pool=MGCrP(m=2, n=3), norm=SvPN(num_sv=3))
    body = vspec.load_spec(ROOT / "specs/simplevit_s.py")  # no class token
    with pytest.raises(SpecError, match="head: the second_order head with sum fusion needs class_token"):
        vspec.override(body, {"head.kind": "second_order"})
    assert vspec.override(body, {"head.kind": "second_order", "head.fusion": "aggr_all"}).head.fusion == "aggr_all"


def test_one_line_head_swap_on_another_body():
    spec = vspec.override(vspec.load_spec(ROOT / "specs/deit_small.py"), {"head.kind": "second_order"})
    assert isinstance(spec.head, SecondOrderHead) and spec.head.pool == MGCrP()
    embed = vspec.override(vspec.load_spec(ROOT / "specs/deit_small.py"), {"embedder.kind": "sot_conv"})
    assert isinstance(embed.embedder, SoTEmbed) and embed.grid == (14, 14)


@pytest.mark.parametrize("block", ["dense", "resnet", "inception", "nonlocal"])
@pytest.mark.parametrize("downsample_last", [True, False])
def test_token_embeddings_grid(block, downsample_last):
    e = SoTEmbed(block=block, downsample_last=downsample_last)
    spec = vspec.override(vspec.load_spec(ROOT / "specs/deit_tiny.py"), {"depth": 1, "img_size": 64})
    spec = attrs.evolve(spec, embedder=e)
    model = vspec.build(spec).eval()
    with torch.no_grad():
        tokens = model.embedder(torch.randn(2, 3, 64, 64))
    side = 64 // (16 if downsample_last else 8)
    assert tokens.shape == (2, side * side, 192) and spec.grid == (side, side)


def test_readme_sot_table_and_the_7_7m_note():
    """The SoT page's table holds vspec's measured figures; the m = n = 12 remark is measured too."""
    import re

    text = doc("families/sot")
    rows = re.findall(r"^\| (sot_\w+) \| ([\d.]+) M \| [\d.]+ M \| [\d.]+ M \| ([\d.]+) G \| [\d.]+ G \| "
                      r"([\d.]+) G \|$",
                      text, re.M)
    assert {r[0] for r in rows} == set(RELEASED)
    for name, params, conv_linear, total in rows:
        prof = vspec.profile(vspec.load_spec(ROOT / f"specs/{name}.py"))
        assert params == f"{prof.params_trainable / 1e6:.3f}"
        assert conv_linear == f"{prof.conventions['conv_linear'] / 1e9:.3f}"
        assert total == f"{prof.macs / 1e9:.3f}"
    m12 = vspec.override(vspec.load_spec(ROOT / "specs/sot_tiny.py"), {"head.pool.m": 12, "head.pool.n": 12})
    assert "7.67 M" in text and f"{vspec.profile(m12).params_trainable / 1e6:.2f}" == "7.67"


def test_sot_head_on_swin_table_holds_the_measurement():
    """The SoT page: SoT's head on Swin (MGCrP in place of GAP, or sum fusion with the mean token as z0) beside
    SoT Table 5; Swin-B's count is the paper's 95.9 M."""
    import re

    text = doc("families/sot")
    rows = re.findall(r"^\| (swin_\w+_sot)(, sum \+ mean token)? \| ([\d.]+) M \| [\d.]+ M \| ([\d.]+) G \| "
                      r"([\d.]+) G \| [\d.]+ G \|$", text, re.M)
    assert len(rows) == 4
    for name, variant, params, conv_linear, total in rows:
        spec = vspec.load_spec(ROOT / f"specs/{name}.py")
        assert spec.class_token is False and spec.head.fusion == "aggr_all"
        if variant:
            spec = vspec.override(spec, {"head.fusion": "sum", "head.z0": "mean_token"})
        prof = vspec.profile(spec)
        assert params == f"{prof.params / 1e6:.3f}"
        assert conv_linear == f"{prof.conventions['conv_linear'] / 1e9:.3f}"
        assert total == f"{prof.macs / 1e9:.3f}"
        if name == "swin_base_sot" and not variant:
            assert round(prof.params / 1e6, 1) == 95.9  # SoT Table 5c
        if name == "swin_tiny_sot" and not variant:  # "an MGCrP of 25 x 25 would give 31.5 M"
            m25 = vspec.override(spec, {"head.pool.m": 25, "head.pool.n": 25})
            assert round(vspec.profile(m25).params / 1e6, 1) == 31.5 and "31.5 M" in text
        swin = vspec.profile(vspec.load_spec(ROOT / f"specs/{name.removesuffix('_sot')}.py"))
        head_macs = {"swin_tiny_sot": 14, "swin_base_sot": 31}[name]  # "vspec's head adds 14 / 31 M MACs"
        assert round((prof.macs - swin.macs) / 1e6) in (head_macs, head_macs + 1)


@pytest.mark.parametrize("fusion", ["sum", "concat", "aggr_all", "late"])
def test_get_classifier_maps_pre_logits_to_logits(fusion):
    """timm's contract for every fusion: get_classifier()(forward_head(x, pre_logits=True)) is the logits
    (for sum and late fusion, one callable over both classifiers)."""
    spec = vspec.override(vspec.load_spec(ROOT / "specs/sot_7layer.py"),
                          {"depth": 1, "head.fusion": fusion, "num_classes": 5, "head.pool.m": 4, "head.pool.n": 4})
    torch.manual_seed(0)
    model = vspec.build(spec).eval()
    with torch.no_grad():
        feats = model.forward_features(torch.randn(2, 3, 112, 112))
        logits = model.forward_head(feats)
        classifier = model.get_classifier()
        assert callable(classifier) and isinstance(classifier, torch.nn.Module)
        assert torch.allclose(classifier(model.forward_head(feats, pre_logits=True)), logits, atol=1e-5)
    model.reset_classifier(0)
    assert isinstance(model.get_classifier(), torch.nn.Identity)


@pytest.mark.parametrize("momentum", [0.1, None])
def test_the_masked_batch_norm_is_batch_norm_on_the_kept_tokens(momentum):
    """MGCrP's BatchNorm over a text batch's real tokens, computed without selecting them (a selection reads its
    size back from the device): the output, the gradient and the running statistics of `bn(h[mask])`, in float64
    (exponential or cumulative running averages)."""
    from vspec.models.sot.modules import masked_batch_norm

    torch.manual_seed(0)
    ref, got = (torch.nn.BatchNorm1d(6, momentum=momentum).double() for _ in range(2))
    with torch.no_grad():
        ref.weight.uniform_(), ref.bias.uniform_()
    got.load_state_dict(ref.state_dict())
    for _ in range(3):
        h = torch.randn(3, 7, 6, dtype=torch.float64, requires_grad=True)
        mask = torch.rand(3, 7) > 0.4
        want, out = ref(h[mask]), masked_batch_norm(got, h, mask)[mask]
        g = torch.randn_like(want)
        assert torch.allclose(out, want, rtol=0, atol=1e-12)
        assert torch.allclose(*(torch.autograd.grad(y, h, g)[0] for y in (out, want)), rtol=0, atol=1e-12)
    for name, buffer in ref.named_buffers():
        assert torch.allclose(getattr(got, name), buffer, rtol=0, atol=1e-12), name
