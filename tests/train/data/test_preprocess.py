"""Published weights carry their preprocessing (issue 44, item 1): every weights entry names its inputs (image:
mean, std, crop, interpolation, size; text: the tokenizer), the timm-sourced ones equal to timm's own pretrained
configs; a model holding them exposes `pretrained_cfg` (timm's resolve_data_config reads it), model folders and
checkpoints keep it, and vspec eval / tools/train.py use it by default, flags overriding, saying what they used."""

import json

import pytest
import torch

import vspec
from tests.helpers.caches import hub_put, safetensors_bytes
from vspec.cli import eval as eval_command
from vspec.factory import presets
from vspec.spec import IMAGENET_MEAN, IMAGENET_STD, Hub, Preprocess, PublishedWeights, SpecError, load_weights_table
from vspec.weights import converted

FIELDS = ("mean", "std", "crop_pct", "interpolation", "input_size")


def entries():
    return [(name, tag, entry) for name, file in sorted(presets().items())
            for tag, entry in (load_weights_table(file) or {}).items()]


def test_every_timm_sourced_entry_is_timm_pretrained_cfg_field_by_field():
    timm = pytest.importorskip("timm")
    checked = 0
    for name, tag, entry in entries():
        if entry.converter != "timm":
            continue
        assert isinstance(entry.source, Hub) and entry.source.repo.startswith("timm/"), (name, tag)
        cfg = timm.models.get_pretrained_cfg(entry.source.repo.removeprefix("timm/"))
        assert cfg is not None, (name, tag)
        for field in FIELDS:
            ours, theirs = getattr(entry.preprocess, field), getattr(cfg, field)
            assert ours == theirs, (name, tag, field, ours, theirs)
        checked += 1
    assert checked >= 9


def test_every_entry_names_its_inputs_and_an_entry_without_them_is_refused():
    for name, tag, entry in entries():
        cfg = entry.data_config()
        assert (set(cfg) == {"tokenizer"}) == (entry.converter == "hf"), (name, tag)
        assert cfg.get("tokenizer") or (len(cfg["mean"]) == len(cfg["std"]) == cfg["input_size"][0]), (name, tag)
    source = Hub("timm/x", "model.safetensors")
    with pytest.raises(SpecError, match="preprocess="):
        PublishedWeights(source=source, converter="timm", params=1, licence="MIT")
    with pytest.raises(SpecError, match="every std must be > 0"):
        Preprocess(IMAGENET_MEAN, (0.2, 0.0, 0.2), crop_pct=0.9)
    with pytest.raises(SpecError, match="one of each per input channel"):
        Preprocess((0.5,), (0.5,), crop_pct=0.9)
    with pytest.raises(SpecError, match="interpolation"):
        Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9, interpolation="lanczos7")
    for crop in (1e-6, 0.2, 4.5, 1e308):  # the test-time resize within 4x the input size, as eval's --crop-pct
        with pytest.raises(SpecError, match="crop_pct: must be"):
            Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=crop)


def _vit_base_cache(caches):
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    ref = timm.create_model("vit_base_patch16_224")
    hub_put(caches["hf"], "timm/vit_base_patch16_224.augreg2_in21k_ft_in1k", "model.safetensors",
            safetensors_bytes(ref.state_dict()))


@pytest.mark.slow  # ViT-B at full size, ~15 s: make test-slow
def test_vit_base_pretrained_is_normalised_with_half_everywhere(caches, capsys, tmp_path):
    timm = pytest.importorskip("timm")
    _vit_base_cache(caches)
    argv = ["vit_base", "--pretrained", "--data", "synthetic", "--synthetic-size", "4", "--batch-size", "4"]
    assert eval_command.main(argv) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("eval.py: inputs: mean 0.5 0.5 0.5, std 0.5 0.5 0.5, crop 0.9, bicubic "), first
    assert "vit_base (augreg2_in21k_ft_in1k)'s preprocessing" in first
    assert eval_command.main([*argv, "--json"]) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert inputs["mean"] == inputs["std"] == [0.5] * 3 and inputs["crop_pct"] == 0.9
    # the flags override, and say so
    flags = ["--mean", "0.1", "0.2", "0.3", "--crop-pct", "1.0", "--interpolation", "bilinear"]
    assert eval_command.main([*argv, *flags]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "mean 0.1 0.2 0.3, std 0.5 0.5 0.5, crop 1, bilinear" in first
    assert "--crop-pct --interpolation --mean given" in first
    # the model, its folder and its checkpoint carry timm's pretrained_cfg: timm's transform is the weights'
    model = vspec.create_model("vit_base", pretrained=True)
    data = timm.data.resolve_data_config(model=model)
    assert data["mean"] == data["std"] == (0.5, 0.5, 0.5) and data["crop_pct"] == 0.9
    normalise = timm.data.create_transform(**data).transforms[-1]
    assert tuple(normalise.mean.tolist()) == (0.5, 0.5, 0.5)
    folder = json.loads((converted.converted_folder("vit_base", "augreg2_in21k_ft_in1k") / "config.json").read_text())
    assert folder["pretrained_cfg"]["mean"] == [0.5] * 3
    vspec.save(model, tmp_path / "m.pt")
    assert vspec.load(tmp_path / "m.pt").pretrained_cfg == model.pretrained_cfg
    # a folder an earlier vspec converted (no record) gets one in place, its weights kept: no fetch, offline
    file = converted.converted_folder("vit_base", "augreg2_in21k_ft_in1k") / "config.json"
    file.write_text(json.dumps({k: v for k, v in json.loads(file.read_text()).items() if k != "pretrained_cfg"}))
    for blob in caches["hf"].rglob("blobs/*"):
        blob.unlink()
    again = vspec.create_model("vit_base", pretrained=True)
    assert again.pretrained_cfg["mean"] == (0.5, 0.5, 0.5) and again.pretrained_cfg["verified"] is False
    assert json.loads(file.read_text())["pretrained_cfg"]["verified"] is False
    # a model without published weights holds none: vspec's defaults (ImageNet's)
    vspec.save(vspec.create_model("deit_tiny", num_classes=10), tmp_path / "fresh.pt")
    assert eval_command.main([str(tmp_path / "fresh.pt"), "--data", "synthetic", "--synthetic-size", "4"]) == 0
    assert "mean 0.485 0.456 0.406, std 0.229 0.224 0.225, crop 0.875, bicubic (vspec's defaults)" in \
        capsys.readouterr().out.splitlines()[0]


def test_a_fine_tuning_run_uses_and_records_the_weights_inputs(caches, tmp_path, monkeypatch, capsys):
    timm = pytest.importorskip("timm")
    from vspec.cli import train as train_command

    folder = tmp_path / "specs"
    folder.mkdir()
    import attrs

    deit = vspec.load_spec(presets()["deit_tiny"])
    spec = attrs.evolve(deit, dim=16, depth=1, img_size=(16, 16), num_classes=3,
                        embedder=attrs.evolve(deit.embedder, patch_size=8),
                        block=attrs.evolve(deit.block, attention=attrs.evolve(deit.block.attention, heads=2)))
    params = sum(p.numel() for p in vspec.build(spec).parameters())
    ref = timm.create_model("deit_tiny_patch16_224", img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2,
                            num_classes=3)
    hub_put(caches["hf"], "tiny/half", "model.safetensors", safetensors_bytes(ref.state_dict()))
    (folder / "tiny_half.py").write_text(
        "from vspec.spec import INCEPTION_MEAN, INCEPTION_STD, Hub, Preprocess, PublishedWeights, from_json\n"
        f"SPEC = from_json({vspec.to_json(spec)!r})\n"
        "WEIGHTS = {'half': PublishedWeights(source=Hub('tiny/half', 'model.safetensors'), converter='timm', "
        f"params={params}, licence='MIT', classes=3, "
        "preprocess=Preprocess(INCEPTION_MEAN, INCEPTION_STD, crop_pct=0.95, interpolation='bilinear', "
        "input_size=(3, 16, 16)))}\n")
    monkeypatch.setenv("VSPEC_SPECS", str(folder))
    out = tmp_path / "run"
    common = ["--data", "synthetic", "--synthetic-size", "8", "--batch-size", "4", "--out", str(out)]
    assert train_command.main(["tiny_half", "--pretrained", "--epochs", "1", "--save-format", "folder", *common]) == 0
    assert "note: inputs: mean 0.5 0.5 0.5, std 0.5 0.5 0.5, bilinear (tiny_half (half)'s preprocessing)" in \
        capsys.readouterr().err
    ckpt = torch.load(out / "last.pt", weights_only=False)
    assert ckpt["inputs"]["mean"] == [0.5] * 3 and ckpt["inputs"]["interpolation"] == "bilinear"
    # evaluating the run's checkpoint, or the model folder it wrote, normalises as it trained and validated
    assert eval_command.main([str(out / "best.pt"), "--data", "synthetic", "--synthetic-size", "8"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "mean 0.5 0.5 0.5, std 0.5 0.5 0.5, crop 1, bilinear (the training run's inputs)" in first
    folder = json.loads((out / "final" / "config.json").read_text())["pretrained_cfg"]
    assert folder["mean"] == [0.5] * 3 and folder["crop_pct"] == 1 and folder["interpolation"] == "bilinear"
    assert eval_command.main([str(out / "final"), "--data", "synthetic", "--synthetic-size", "8"]) == 0
    assert "mean 0.5 0.5 0.5, std 0.5 0.5 0.5, crop 1, bilinear" in capsys.readouterr().out.splitlines()[0]
    model = vspec.create_model(out / "final")  # create_model of a folder keeps its record, features too
    assert model.pretrained_cfg["mean"] == (0.5, 0.5, 0.5)
    assert vspec.create_model(out / "final", features_only=True).pretrained_cfg["interpolation"] == "bilinear"
    # a resume keeps the run's inputs; a flag given then replaces its own key alone
    assert train_command.main(["tiny_half", "--resume", "--epochs", "2", "--interpolation", "bicubic", *common]) == 0
    assert "note: inputs: mean 0.5 0.5 0.5, std 0.5 0.5 0.5, bicubic (tiny_half (half)'s preprocessing, " \
           "--interpolation given)" in capsys.readouterr().err
