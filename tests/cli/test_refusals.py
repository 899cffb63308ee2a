"""The newer inputs hardened (issue 32, items 4, 5, 7, 8, 10): eval.py refuses --img-size on a text model and a
size that does not fit, NaN / inf weights are refused wherever a model is read, a name too long and special files
in a model folder are one line naming the file, every consumer reads a model folder as it reads a .pt
checkpoint, and SoT's language-head converter refuses keys it does not know."""

import json
import os
from pathlib import Path

import pytest
import torch

import vspec
import vspec.cli
from tests.helpers.checks import FIXTURES
from tests.helpers.text import text_body
from vspec.cli.eval import main as eval_main
from vspec.convert import ConversionError, from_official
from vspec.spec import MHSA, Block, Model, PatchEmbed, SpecError
from vspec.weights.checkpoint import CheckpointError

ROOT = Path(__file__).resolve().parents[2]
DIGITS = Model(embedder=PatchEmbed(patch_size=4), dim=16, depth=1, block=Block(attention=MHSA(heads=2)), img_size=8,
               in_chans=1, num_classes=10)


def tiny_model(fill: float | None = None, scale: float | None = None) -> torch.nn.Module:
    torch.manual_seed(0)
    model = vspec.build(DIGITS)
    with torch.no_grad():
        if fill is not None:
            model.stages[0].blocks[0].ffn.fc2.bias[3] = fill
        if scale is not None:
            for p in model.parameters():
                p.fill_(scale)
    return model


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


# ---------------------------------------------------------------- item 4: eval.py on what it cannot evaluate
def test_eval_refuses_img_size_on_a_text_checkpoint(tmp_path, capsys):
    spec = vspec.override(vspec.load_spec(ROOT / "specs" / "demo_text.py"), {"depth": 1, "dim": 32,
                                                                            "block.ffn.hidden": 64})
    ckpt = vspec.save(vspec.build(spec), tmp_path / "text.pt")
    assert eval_main([str(ckpt), "--data", "rt-polarity", "--img-size", "64"]) == 2
    assert "--img-size: the checkpoint's model is a text body" in one_line(capsys)


@pytest.mark.parametrize("fill", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_refused_by_every_reader(tmp_path, capsys, fill):
    """A model folder or a .pt checkpoint with a NaN / inf weight: from_pretrained, create_model, vspec.load,
    eval.py, export and analyze refuse it in one line naming the file and the weight (before: eval.py printed
    `loss nan` and exited 0)."""
    model = tiny_model(fill)
    folder = vspec.save_pretrained(model, tmp_path / "folder")
    ckpt = vspec.save(model, tmp_path / "m.pt")
    for path, file in ((folder, folder / "model.safetensors"), (ckpt, ckpt)):
        needle = f"{file}: weight stages.0.blocks.0.ffn.fc2.bias holds NaN or infinite values"
        for read in (vspec.load, vspec.create_model, *((vspec.from_pretrained,) if path == folder else ())):
            with pytest.raises(CheckpointError, match="^" + needle):
                read(path)
        assert eval_main([str(path), "--data", "digits"]) == 2
        assert needle in one_line(capsys)
        assert vspec.cli.main(["export", str(path), "--out", str(tmp_path / "m.pt2")]) == 2
        assert needle in one_line(capsys)


def test_eval_of_finite_weights_whose_loss_overflows_exits_2(tmp_path, capsys):
    folder = vspec.save_pretrained(tiny_model(scale=1e30), tmp_path / "huge")
    assert eval_main([str(folder), "--data", "digits"]) == 2
    err = one_line(capsys)
    assert f"{folder}: the loss is nan: the model's outputs are not finite" in err, err


# ---------------------------------------------------------------- item 5: names and special files
def test_a_name_too_long_is_one_line():
    for name in ("a" * 5000, "a" * 300 + ".pt", "/tmp/" + "b" * 300):
        with pytest.raises(SpecError) as info:
            vspec.create_model(name)
        assert "\n" not in str(info.value) and len(str(info.value)) < 400, str(info.value)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
@pytest.mark.parametrize("target", ["/proc/self/mem", "/dev/zero", "fifo"])
def test_a_model_folder_file_that_is_a_special_file_is_one_line(tmp_path, capsys, name, target):
    folder = vspec.save_pretrained(tiny_model(), tmp_path / "folder")
    (folder / name).unlink()
    if target == "fifo":
        os.mkfifo(folder / name)
    else:
        (folder / name).symlink_to(target)
    for read in (vspec.from_pretrained, vspec.create_model, vspec.load):
        with pytest.raises(CheckpointError, match=f"^{folder / name}: "):
            read(folder)
    assert eval_main([str(folder), "--data", "digits"]) == 2
    assert f"eval.py: error: {folder / name}: " in one_line(capsys)


# ---------------------------------------------------------------- item 7: eval.py's size guard
def test_eval_at_a_size_that_does_not_fit_is_one_line(tmp_path, capsys):
    """At 65,536 px attention's map is beyond torch's tensor limit, at 2,048 px a batch's forward pass needs
    terabytes: both refused before anything is resampled or allocated (before: the allocator's error)."""
    ckpt = vspec.save(tiny_model(), tmp_path / "m.pt")
    assert eval_main([str(ckpt), "--data", "digits", "--img-size", "65536"]) == 2
    err = one_line(capsys)
    assert f"{ckpt}: img_size (65536, 65536): too large for torch: its largest tensor would take" in err, err
    assert eval_main([str(ckpt), "--data", "digits", "--img-size", "2048"]) == 2
    err = one_line(capsys)
    assert f"{ckpt}: img_size (2048, 2048): the model at img_size (2048, 2048) needs about" in err, err
    assert eval_main([str(ckpt), "--data", "digits", "--img-size", "16"]) == 0  # a size that fits


# ---------------------------------------------------------------- item 8: a model folder wherever a checkpoint goes
def test_every_consumer_reads_a_model_folder(tmp_path, capsys):
    model = tiny_model().eval()
    folder = vspec.save_pretrained(model, tmp_path / "folder")
    out = tmp_path / "m.pt2"
    assert vspec.cli.main(["export", str(folder), "--out", str(out), "--check"]) == 0, capsys.readouterr().err
    x = vspec.example_input(DIGITS, 3)
    with torch.no_grad():
        assert (torch.export.load(out).module()(x) - model(x)).abs().max() <= 1e-5
    assert vspec.cli.main(["analyze", str(folder), "--what", "cka", "--batch-size", "4", "--out-dir",
                           str(tmp_path / "analysis")]) == 0, capsys.readouterr().err
    assert (tmp_path / "analysis" / "folder.cka.json").is_file()
    for read in (vspec.load, vspec.create_model, vspec.from_pretrained):
        with torch.no_grad():
            assert torch.equal(read(folder).eval()(x), model(x))
    assert eval_main([str(folder), "--data", "digits"]) == 0
    # a training run's state is in OUT/last.pt: a folder given for it is refused
    from vspec.train import checkpoints

    with pytest.raises(CheckpointError, match="a folder, not a checkpoint file"):
        checkpoints.load(folder)


# ---------------------------------------------------------------- item 10: SoT's language head converter
@pytest.mark.parametrize("where", ["top", "bert_config", "representationConfig", "representationConfig.args",
                                   "representationConfig.normalization.args", "dimension_reduction", "BertConfig"])
def test_the_language_head_converter_refuses_unknown_keys(where):
    data = torch.load(FIXTURES / "sot_text_head.pt", weights_only=False)
    config = json.loads(json.dumps(data["config"]))
    body = text_body(dim=64)
    if where == "top":
        config["colour"] = 1
        needle = "SoT text (top level) config: unknown argument 'colour'"
    elif where == "dimension_reduction":
        config["representationConfig"]["args"]["dimension_reduction"] = [24, 16]
        needle = "SoT text config: representationConfig.args.dimension_reduction [24, 16] is not [MGCrP_q, MGCrP_k]"
    elif where == "BertConfig":  # the fork's own form: a BertConfig with the MGCrP fields at the top level
        config = {**config["bert_config"], "hidden_dropout_prob": 0.1, "colour": 1}
        needle = "SoT text (BertConfig) config: unknown argument 'colour'"
    else:
        node = config
        for key in where.split("."):
            node = node[key]
        node["colour"] = 1
        needle = f"SoT text {where} config: unknown argument 'colour'"
    with pytest.raises(ConversionError) as info:
        from_official("sot_text", data["state_dict"], config, body=body)
    assert str(info.value).startswith(needle) and "\n" not in str(info.value), str(info.value)
