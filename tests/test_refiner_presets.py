"""Refined-ViT as released: the authors' reference outputs, the presets' parameter and MAC counts (Refiner
issue: PAPERS.md's figures), the map pipeline counted as attention, and receptive-field calibration
(Sec. 4.4) through tools/eval.py on a Refiner checkpoint."""

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import FIXTURES
from PIL import Image

import vspec
from vspec.convert import ConversionError, from_official
from vspec.nn.refiner import MapAttention
from vspec.train.cli import eval_main, train_main
from vspec.train.data import build_datasets, build_transforms

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["refiner_cls", "refiner_dense", "refiner_s_pattern", "refiner_apply_transform"])
def test_released_models_reproduce_the_reference_outputs(name):
    data = torch.load(FIXTURES / f"{name}.pt", weights_only=True)
    model = from_official("refiner", data["state_dict"], data["config"]).eval()
    with torch.no_grad():
        assert (model(data["x"]) - data["y"]).abs().max() <= 1e-5


def test_a_config_that_does_not_fit_is_refused():
    data = torch.load(FIXTURES / "refiner_cls.pt", weights_only=True)
    with pytest.raises(ConversionError, match="head.aux.weight"):  # the dense head has no weights there
        from_official("refiner", data["state_dict"], {**data["config"], "return_dense": True})
    with pytest.raises(ConversionError, match="apply_transform"):
        from_official("refiner", data["state_dict"], {**data["config"], "apply_transform": [False]})


# preset -> (parameters, fvcore MACs at 224 px): PAPERS.md, Refiner (the released factories' counts)
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
    from vspec.analysis import attention_maps

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
