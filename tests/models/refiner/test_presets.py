"""Refined-ViT as released: the authors' reference outputs, the presets' parameter and MAC counts
(docs/families/refiner.md's figures), the map pipeline counted as attention, and receptive-field calibration
(Sec. 4.4) through tools/eval.py on a Refiner checkpoint."""

import json
import warnings
from pathlib import Path

import attrs
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import benchmarks.refiner
import vspec
import vspec.models.refiner.convert
from tests.helpers.checks import FIXTURES, argument_cases, assert_close_to_stored, check_argument
from vspec.cli.eval import main as eval_main
from vspec.cli.train import main as train_main
from vspec.convert import ConversionError, from_official
from vspec.models.refiner.modules import MapAttention
from vspec.spec import DenseAux
from vspec.train.data.sources import build_datasets
from vspec.train.data.transforms import build_transforms

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", ["refiner_cls", "refiner_dense", "refiner_s_pattern", "refiner_apply_transform"])
def test_released_models_reproduce_the_reference_outputs(name):
    data = torch.load(FIXTURES / f"{name}.pt", weights_only=True)
    model = from_official("refiner", data["state_dict"], data["config"]).eval()
    with torch.no_grad():
        assert_close_to_stored(model(data["x"]), data["y"])


def test_a_config_that_does_not_fit_is_refused():
    data = torch.load(FIXTURES / "refiner_cls.pt", weights_only=True)
    with pytest.raises(ConversionError, match="head.aux.weight"):  # the dense head has no weights there
        from_official("refiner", data["state_dict"], {**data["config"], "return_dense": True})
    with pytest.raises(ConversionError, match="apply_transform"):
        from_official("refiner", data["state_dict"], {**data["config"], "apply_transform": [False]})



# ---------------------------------------------------------------- every constructor argument
# Refiner_ViT.__init__'s arguments (zhoudaquan/Refiner_ViT @ b3e8cb0, models/refined_transformer.py)
REFINER_CONSTRUCTOR = (
    "img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth", "num_heads", "mlp_ratio", "qkv_bias",
    "qk_scale", "drop_rate", "attn_drop_rate", "drop_path_rate", "hybrid_backbone", "norm_layer", "group",
    "share_atten", "cos_reg", "use_cnn_embed", "apply_transform", "interpolate_pos_embedding", "head_expand",
    "mix_token", "return_dense",
)


def refiner_fixture(name="refiner_cls"):
    return torch.load(FIXTURES / f"{name}.pt", weights_only=True)


def attentions(spec):
    return [b.attention for b in spec.stages[0].blocks]


def base():
    """refiner_cls's config: 224 px, patch 16, dim 96, [compute, shared] x 2, 4 heads, no dense head."""
    return refiner_fixture()["config"]


def as_base(spec):
    return spec == vspec.models.refiner.convert.REFINER.spec_of(base())


# argument -> [(changes to the fixture's config, the converted spec's expected property or the refusal's text)]
REFINER_CASES = {
    "img_size": [({"img_size": 112}, lambda s: s.img_size == (112, 112)),
                 ({"img_size": (112, 96)}, r"img_size \(112, 96\): the released CNN stem takes one int")],
    "patch_size": [({"patch_size": 32}, lambda s: s.embedder == vspec.ConvStem(patch_size=32))],
    "in_chans": [({"in_chans": 1}, lambda s: s.in_chans == 1)],
    "num_classes": [({"num_classes": 0}, lambda s: s.num_classes == 0)],
    "embed_dim": [({"embed_dim": 48}, lambda s: s.dim == 48)],
    "depth": [({"depth": 3}, lambda s: [(a.reuse, a.add_incoming) for a in attentions(s)] ==
               [(False, False), (False, True), (False, True)]),
              ({"depth": [False, True], "apply_transform": [False, False]},
               lambda s: [a.reuse for a in attentions(s)] == [False, True]),
              ({"depth": "ffff"}, r"depth 'ffff': an int, or a list of booleans")],
    "num_heads": [({"num_heads": 2}, lambda s: {a.heads for a in attentions(s)} == {2})],
    "mlp_ratio": [({"mlp_ratio": 2}, lambda s: {b.ffn.ratio for b in s.stages[0].blocks} == {2.0})],
    "qkv_bias": [({"qkv_bias": False}, lambda s: {a.qkv_bias for a in attentions(s)} == {False})],
    "qk_scale": [({"qk_scale": 0.125}, lambda s: {a.scale for a in attentions(s)} == {0.125}),
                 ({"qk_scale": 0}, lambda s: {a.scale for a in attentions(s)} == {None}),  # `qk_scale or default`
                 ({"qk_scale": "x"}, r"qk_scale 'x': a number, or None")],
    "drop_rate": [({"drop_rate": 0.1}, r"drop_rate 0.1: the released model also drops after the position embedding")],
    "attn_drop_rate": [({"attn_drop_rate": 0.1}, lambda s: {a.attn_drop for a in attentions(s)} == {0.1})],
    "drop_path_rate": [({"drop_path_rate": 0.1}, lambda s: s.drop_path == 0.1)],
    "hybrid_backbone": [({"hybrid_backbone": "resnet50"}, r"hybrid_backbone: the CNN-backbone embedding")],
    "norm_layer": [({"norm_layer": "<class 'torch.nn.modules.normalization.LayerNorm'>"},
                    lambda s: {b.norm.eps for b in s.stages[0].blocks} == {1e-5}),
                   ({"norm_layer": "BatchNorm1d"}, r"norm_layer 'BatchNorm1d': only LayerNorm")],
    "group": [({"group": True}, as_base)],
    "share_atten": [({"share_atten": False}, as_base)],
    "cos_reg": [({"cos_reg": True}, lambda s: s.attention_maps and as_base(attrs.evolve(s, attention_maps=False)))],
    "use_cnn_embed": [({"use_cnn_embed": False}, lambda s: s.embedder == vspec.PatchEmbed(patch_size=16))],
    "apply_transform": [({"apply_transform": [True, False, True, False]},
                         lambda s: [a.refine and a.refine.expansion for a in attentions(s)] == [6, 3, 6, 3]),
                        ({"apply_transform": None}, r"apply_transform None with a listed depth")],
    "interpolate_pos_embedding": [
        ({"interpolate_pos_embedding": True}, as_base),
        ({"interpolate_pos_embedding": True, "img_size": 112}, r"interpolate_pos_embedding with a 7 x 7 grid")],
    "head_expand": [({"head_expand": 2}, as_base),  # transform off
                    ({"head_expand": 2, "apply_transform": [True] * 4},
                     lambda s: [a.refine.expansion for a in attentions(s)] == [2, 3, 2, 3])],
    "mix_token": [({"mix_token": True, "return_dense": True}, lambda s: s.head.dense == DenseAux(mix_token=True)),
                  ({"mix_token": True}, r"mix_token without return_dense: the released constructor asserts")],
    "return_dense": [({"return_dense": True}, lambda s: s.head.dense == vspec.spec.DenseAux())],
    "unknown keys": [({"window": 7}, r"unknown argument 'window'; the released constructor takes img_size, ")],
}


def test_the_refiner_cases_cover_every_constructor_argument():
    assert tuple(vspec.models.refiner.convert.REFINER.arguments) == REFINER_CONSTRUCTOR
    assert list(REFINER_CASES) == [*REFINER_CONSTRUCTOR, "unknown keys"]


@pytest.mark.parametrize(**argument_cases(REFINER_CASES))
def test_every_refiner_argument_is_honoured_or_refused_by_name(changes, expect):
    config = {**base(), **changes}
    check_argument("refiner", "Refiner", refiner_fixture()["state_dict"], config, expect)


def test_refiner_qk_scale_sets_the_attention_scale_as_released():
    """Refiner_ViT_S(qk_scale=0.125) used to convert at head_dim ** -0.5: here the released model's scale
    (benchmarks/refiner.py's reference, which reproduces the released fixtures, with its scale set as the
    released `qk_scale or head_dim ** -0.5` does) is what the converted model computes."""
    data = refiner_fixture()
    reference = benchmarks.refiner.Reference(data["config"])
    reference.load_state_dict(data["state_dict"], strict=True)
    for block in reference.blocks:
        block.attn.scale = 0.125
    model = from_official("refiner", data["state_dict"], {**data["config"], "qk_scale": 0.125}).eval()
    with torch.no_grad():
        expected = reference.eval()(data["x"])
        assert (expected - data["y"]).abs().max() > 1e-2  # the scale moves the logits
        assert (model(data["x"]) - expected).abs().max() <= 1e-5  # two formulations, float32


@pytest.mark.parametrize("name,changes", [
    ("refiner_cls", {"attn_drop_rate": 0.1, "drop_path_rate": 0.1, "group": True, "share_atten": False,
                     "interpolate_pos_embedding": True, "cos_reg": True}),
    ("refiner_dense", {"mix_token": True, "cos_reg": True}),
])
def test_refiner_training_only_arguments_leave_the_eval_output_as_released(name, changes):
    """Every one is honoured without a note (MixToken and cos_reg: tests/models/refiner/test_mix_token.py)."""
    data = refiner_fixture(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = from_official("refiner", data["state_dict"], {**data["config"], **changes}).eval()
    with torch.no_grad():
        assert_close_to_stored(model(data["x"]), data["y"])


def test_refiner_without_a_classifier_converts():
    """num_classes 0: the released head and aux_head are identities, so the state dict has none."""
    data = refiner_fixture("refiner_dense")
    state = {k: v for k, v in data["state_dict"].items() if not k.startswith(("head.", "aux_head."))}
    model = from_official("refiner", state, {**data["config"], "num_classes": 0}).eval()
    with torch.no_grad():
        assert model(data["x"]).shape == (2, 96)


# preset -> (parameters, fvcore MACs at 224 px): docs/families/refiner.md, Presets (the released factories' counts)
PRESETS = {
    "refined_vit_s": (25.024e6, 6.819e9), "refined_vit_s_dense": (25.409e6, None),
    "refined_vit_m": (55.030e6, 13.570e9), "refined_vit_m_dense": (55.451e6, None),
    "refined_vit_l": (80.637e6, 19.284e9), "refined_vit_l_dense": (81.150e6, None),
    "refined_vit_s_expand6": (None, 7.233e9),  # the factory's head_expand 6 honoured: the paper's 7.2 G
}


@pytest.mark.parametrize("name", PRESETS)
def test_presets_match_the_released_counts(name):
    params, macs = PRESETS[name]
    prof = vspec.profile(vspec.load_spec(ROOT / "specs" / f"{name}.py"))
    assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs
    if params is not None:
        assert round(prof.params / 1e3) == round(params / 1e3)  # to the thousand, as given
    if macs is not None:
        assert round(prof.macs / 1e6) == round(macs / 1e6)


def test_the_map_pipeline_is_counted_as_attention():
    """A shared block of Refined-ViT-S: A' v, the DLA's three convolutions and its four eval-mode
    BatchNorms (2 MACs per element: scale and shift) all sit in the attention core."""
    prof = vspec.profile(vspec.load_spec(ROOT / "specs" / "refined_vit_s.py"))
    spec = vspec.load_spec(ROOT / "specs" / "refined_vit_s.py")
    model = vspec.build(spec, tie_repeats=True, device="meta")
    n, heads, d, wide = 197, 12, 32, 36
    attn_v = heads * n * n * d
    dla = n * n * (heads * wide + wide * 9 + wide * heads)
    norms = 2 * n * n * (wide + wide + heads + heads)
    shared = model.stages[0].blocks[1].attn.core
    assert isinstance(shared, MapAttention) and shared.refine is not None
    block = n * 384 * 384 + n * 384 * 384 + 2 * n * 384 * 1152  # v, proj, the MLP
    norm_tokens = 2 * 5 * n * 384  # the two LayerNorms, 5 per element
    assert prof.components["stages.0.blocks.1"].macs == block + norm_tokens + attn_v + dla + norms
    compute = prof.components["stages.0.blocks.2"].macs
    assert compute == n * 384 * 1152 + n * 384 * 384 + 2 * n * 384 * 1152 + norm_tokens + 2 * heads * n * n * d
    # the DHVT convention (all but the attention) leaves the whole pipeline out
    blocks = sum(c.macs for k, c in prof.components.items() if k.startswith("stages"))
    attention = 8 * (attn_v + dla + norms) + 8 * 2 * heads * n * n * d
    assert prof.macs - prof.conventions["no_attention_matmuls"] == attention and blocks > attention


def test_receptive_field_calibration_on_a_refiner_checkpoint(tmp_path, capsys):
    """tools/eval.py --crop-ratio > 1 pads the test image (Sec. 4.4): the accuracy it reports on a trained
    Refiner checkpoint is the model's on images resized to size / ratio and zero-padded back."""
    spec = vspec.override(vspec.load_spec(ROOT / "specs" / "refined_vit_s_dense.py"),
                          {"img_size": 32, "embedder.patch_size": 8, "dim": 24, "num_classes": 4,
                           **{f"block.{i}.attention.heads": 2 for i in range(16)}})
    spec = vspec.override(spec, {"block": [b for b in spec.block[:4]], "depth": 4})
    path = tmp_path / "refiner.json"
    path.write_text(vspec.to_json(spec))
    out = tmp_path / "run"
    assert train_main([str(path), "--data", "synthetic", "--synthetic-size", "32", "--out", str(out), "--batch-size",
                       "8", "--device", "cpu", "--seed", "3", "--epochs", "1", "--recipe", "none"]) == 0
    capsys.readouterr()
    results = {}
    for ratio in ("0.875", "1.0", "1.25"):
        assert eval_main([str(out / "last.pt"), "--data", "synthetic", "--synthetic-size", "32", "--seed", "3",
                          "--crop-ratio", ratio, "--json"]) == 0
        results[ratio] = json.loads(capsys.readouterr().out)
    model = vspec.load(out / "last.pt").eval()
    assert model.spec.head.dense is not None
    for ratio, result in results.items():  # the same figures from the padded / cropped images, by hand
        tf = build_transforms(32, 3, train=False, crop_ratio=float(ratio))
        _, val, _ = build_datasets("synthetic", img_size=32, in_chans=3, train_transform=tf, eval_transform=tf,
                                   synthetic_size=32, seed=3, num_classes=4)
        images = torch.stack([val[i][0] for i in range(len(val))])
        labels = torch.tensor([int(val[i][1]) for i in range(len(val))])
        with torch.no_grad():
            logits = model(images)
        assert result["crop_ratio"] == float(ratio) and result["images"] == len(val)
        assert result["top1"] == pytest.approx(100 * (logits.argmax(1) == labels).float().mean().item())
        assert result["loss"] == pytest.approx(F.cross_entropy(logits, labels).item(), rel=1e-5)
    padded = build_transforms(32, 3, train=False, crop_ratio=1.25)(Image.new("RGB", (32, 32), "white"))
    assert torch.equal(padded[:, :3], padded[:, :1].expand(-1, 3, -1))  # a constant frame: the zero pixels
    assert not torch.equal(padded[:, 3:29, 3:29].mean(), padded[:, 0, 0].mean())


def test_analyze_reads_the_maps_that_blocks_hand_on():
    """`vspec analyze`'s maps on Refined-ViT: a compute block shows its softmax map (from its own q, k);
    the shared block after it refines exactly that map (before), and a block that adds the incoming maps
    shows softmax + scale x them."""
    from vspec.models.refiner.analysis import attention_maps

    spec = vspec.override(vspec.load_spec(ROOT / "specs" / "refined_vit_s.py"), {"img_size": 32, "dim": 48})
    torch.manual_seed(0)
    model = vspec.build(spec).eval()
    image = torch.randn(1, 3, 32, 32)
    taps = {}
    hook = model.stages[0].blocks[0].norm1.register_forward_hook(lambda m, a, o: taps.setdefault(0, o))
    shown = attention_maps(model, image, blocks=[0, 1, 2], heads=[0, 1])
    hook.remove()
    attn = model.stages[0].blocks[0].attn
    q, k, _ = attn.qkv(taps[0]).double().chunk(3, dim=-1)
    q, k = (t.reshape(1, -1, 12, 4).transpose(1, 2) for t in (q, k))
    expected = torch.softmax(q @ k.transpose(-2, -1) * 4**-0.5, dim=-1)[0, :2]
    assert torch.allclose(shown[0]["before"], expected, atol=1e-6)
    assert torch.equal(shown[0]["after"], shown[0]["before"])
    assert shown[1]["refined"] and torch.allclose(shown[1]["before"], shown[0]["before"], atol=1e-6)
    assert not torch.allclose(shown[1]["after"], shown[1]["before"])
    assert torch.allclose(shown[2]["before"].sum(-1), 1 + 4**-0.5 * shown[0]["before"].sum(-1), atol=1e-5)
