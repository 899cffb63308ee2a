"""Spec format versions: the files and checkpoints the first-edition release wrote (tests/data/v1, see its
README) load in this one; a newer format gets a one-line error."""

import json
import shutil
import time
from pathlib import Path

import pytest
import torch

import vspec
from tests.helpers.checks import STORED_ATOL, assert_close_to_stored
from vspec.cli import main
from vspec.cli.eval import main as eval_main
from vspec.cli.train import main as train_main
from vspec.spec import VERSION, SpecError, from_dict, from_json, from_toml, to_dict, to_json
from vspec.spec.migrate import state_key_upgrade, upgrade

ROOT = Path(__file__).resolve().parents[2]
V1 = ROOT / "tests/data/v1"
V1_SPECS = sorted(V1.glob("*.json")) + sorted(V1.glob("*.toml"))


@pytest.mark.parametrize("path", V1_SPECS, ids=lambda p: p.name)
def test_first_edition_spec_files_load_as_the_same_models(path):
    old = from_json(path.read_text()) if path.suffix == ".json" else from_toml(path.read_text())
    assert old == vspec.load_spec(ROOT / f"specs/{path.stem}.py")
    data = json.loads(path.read_text()) if path.suffix == ".json" else None
    if data is not None:
        assert "version" not in data and "block" in data and "stages" not in data  # really the old format
    assert to_dict(old)["version"] == VERSION


def test_every_first_edition_preset_is_covered():
    assert {p.stem for p in V1.glob("*.json")} >= {"deit_tiny", "sot_tiny", "dhvt_tiny_cifar_p4", "simplevit_s"}
    assert len(list(V1.glob("*.json"))) == 19  # every preset of that release


@pytest.mark.parametrize("name", ["dhvt_sot", "vit_listed", "train_last", "train_dead_reweight"])
def test_first_edition_checkpoints_reproduce_their_outputs(name):
    """vspec.load rebuilds the model (spec upgraded, `blocks.i` keys now `stages.0.blocks.i`) and computes
    what the old release computed, on another machine: within STORED_ATOL (conftest). A wrong key mapping moves
    the outputs by far more, since the old release perturbed every floating state entry by U(0, 0.1) (checked
    below on one matrix whose rows are flipped)."""
    ref = torch.load(V1 / "outputs.pt", weights_only=True)[name]
    raw = torch.load(V1 / f"{name}.pt", weights_only=True)
    assert any(k.startswith("blocks.") for k in raw["state_dict"])
    model = vspec.load(V1 / f"{name}.pt").eval()
    assert all(k.startswith(("embedder.", "stages.", "norm.", "head.", "cls_token", "pos_embed"))
               for k in model.state_dict())
    with torch.no_grad():
        assert_close_to_stored(model(ref["x"]), ref["y"])
        proj = model.get_parameter("stages.0.blocks.0.attn.proj.weight")
        proj.copy_(proj.flip(0))  # a mapping that mixed up one matrix's rows: 2.7e-4 to 0.31 away
        assert (model(ref["x"]) - ref["y"]).abs().max() > 10 * STORED_ATOL


def test_first_edition_training_checkpoint_evaluates_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(V1 / "train_last.pt", out / "last.pt")
    spec = tmp_path / "spec.json"  # the spec the run was started with, as the old release wrote it
    spec.write_text(torch.load(V1 / "train_last.pt", weights_only=True)["spec"])
    assert eval_main([str(out / "last.pt"), "--data", "synthetic", "--synthetic-size", "64", "--device", "cpu",
                      "--ema"]) == 0
    assert train_main([str(spec), "--data", "synthetic", "--synthetic-size", "64", "--out", str(out), "--epochs", "3",
                       "--batch-size", "16", "--ema-decay", "0.9", "--device", "cpu", "--resume"]) == 0
    ckpt = torch.load(out / "last.pt", weights_only=True)
    assert ckpt["epoch"] == 3 and json.loads(ckpt["spec"])["version"] == VERSION
    assert [m["epoch"] for m in ckpt["metrics"]] == [1, 2, 3]  # the old run's history goes on


def test_training_checkpoint_whose_upgrade_drops_weights_refuses_to_resume(tmp_path, capsys):
    """Its model loads (the dropped DAFF weights never reached the output), but the optimizer state saved
    beside them does not fit: --resume says so in one line instead of failing inside torch."""
    raw = torch.load(V1 / "train_dead_reweight.pt", weights_only=True)
    assert any(".ffn.compress." in k for k in raw["state_dict"])
    model = vspec.load(V1 / "train_dead_reweight.pt")
    assert not any(".ffn.compress." in k for k in model.state_dict())
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(V1 / "train_dead_reweight.pt", out / "last.pt")
    spec = tmp_path / "spec.json"
    spec.write_text(raw["spec"])
    assert train_main([str(spec), "--data", "synthetic", "--synthetic-size", "32", "--out", str(out), "--epochs", "2",
                       "--batch-size", "16", "--device", "cpu", "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "drops weights that could never learn" in err and "vspec.load" in err


def test_newer_format_is_one_line_error(tmp_path, capsys):
    data = {**to_dict(vspec.load_spec(ROOT / "specs/deit_tiny.py")), "version": VERSION + 1}
    with pytest.raises(SpecError, match=rf"^version: spec format {VERSION + 1} is newer than this vspec reads"):
        from_dict(data)
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    assert main(["build", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "newer than this vspec reads" in err
    for bad in (0, "2", True, 2.0):
        with pytest.raises(SpecError, match="^version: must be a positive int"):
            from_dict({**data, "version": bad})


def test_current_files_carry_the_version():
    for name in ("deit_tiny", "swin_tiny"):
        text = to_json(vspec.load_spec(ROOT / f"specs/{name}.py"))
        assert json.loads(text)["version"] == VERSION and from_json(text) == vspec.load_spec(ROOT / f"specs/{name}.py")


def v1_dhvt(**changes):
    block = {"attention": {"kind": "mhsa", "heads": 2}, "ffn": {"kind": "daff", "norm": "layernorm"},
             "head_tokens": {"eps": 1e-4}}
    return {"embedder": {"kind": "sope", "patch_size": 4, "norm": "batchnorm"}, "block": block, "depth": 3, "dim": 16,
            "img_size": 16, "num_classes": 3, "pos_embed": "none", **changes}


def test_upgrade_of_norms_and_head_tokens():
    data, dropped = upgrade(v1_dhvt())
    spec = from_dict(data)
    assert dropped == []
    assert spec.embedder.norm == vspec.Norm("batchnorm", 1e-5)
    assert spec.block.ffn.norm == vspec.Norm("layernorm", 1e-5) and spec.block.ffn.cls == "reweight"
    assert spec.block.head_tokens.norm == vspec.Norm("layernorm", 1e-4)


@pytest.mark.parametrize("changes,blocks_changed", [
    ({"class_token": False, "head": {"kind": "gap"}}, [0, 1, 2]),  # no class token: every block's re-weighting
    ({"head": {"kind": "gap"}}, [2]),  # a head that never reads the class token: the last block's
])
def test_upgrade_of_dead_class_token_reweighting(changes, blocks_changed):
    data, dropped = upgrade(v1_dhvt(**changes))
    spec = from_dict(data)
    cls = [b.ffn.cls for b in spec.blocks]
    assert [i for i, c in enumerate(cls) if c == "identity"] == blocks_changed
    assert all(c == "reweight" for i, c in enumerate(cls) if i not in blocks_changed)
    rename = state_key_upgrade(1, dropped)
    for i in range(3):
        key = f"blocks.{i}.ffn.compress.weight"
        assert rename(key) == (None if i in blocks_changed else f"stages.0.blocks.{i}.ffn.compress.weight")
    assert rename("blocks.0.attn.qkv.weight") == "stages.0.blocks.0.attn.qkv.weight"
    # what is left is exactly what the upgraded model has
    model = vspec.build(spec, device="meta")
    assert {k for k in model.state_dict() if ".ffn.compress." in k} == \
        {f"stages.0.blocks.{i}.ffn.compress.{p}" for i in range(3) if i not in blocks_changed
         for p in ("weight", "bias")}


# ---------------------------------------------------------------- issue 19: the upgrade sizes before it loops
@pytest.mark.parametrize("data,message", [
    ({"block": [], "head": {"kind": "gap"}}, "depth: must be >= 1, got 0"),
    ({"block": [], "class_token": False}, "depth: must be >= 1, got 0"),
    (v1_dhvt(block=[], head={"kind": "gap"}), "block: must be a block or a non-empty list of blocks, got ()"),
])
def test_upgrade_of_an_empty_listed_stack_is_a_spec_error(data, message, tmp_path, capsys):
    """The old upgrade read the last block of the list: a raw IndexError from a file, --set or a checkpoint."""
    upgraded, dropped = upgrade(data)
    assert upgraded["block"] == [] and dropped == []
    with pytest.raises(SpecError) as e:
        from_dict(data)
    assert str(e.value) == message
    path = tmp_path / "empty.pt"
    torch.save({"spec": json.dumps(data), "state_dict": {}}, path)
    assert main(["analyze", str(path)]) == 2
    assert capsys.readouterr().err == f"vspec: error: {path}: {message}\n"


@pytest.mark.parametrize("changes", [{"head": {"kind": "gap"}}, {"class_token": False, "head": {"kind": "gap"}}])
def test_upgrade_refuses_a_huge_dhvt_depth_before_looping(changes):
    """depth 2**31 - 1: the old upgrade listed (gap head) or renamed (no class token) every block before the
    spec was validated, and ran until memory ran out. Now a one-line error in well under a second; depths
    the validators refuse anyway are left to them."""
    from vspec.spec.migrate import MAX_UPGRADE_DEPTH

    t0 = time.perf_counter()
    for depth in (2**31 - 1, MAX_UPGRADE_DEPTH + 1):
        with pytest.raises(SpecError, match=rf"^depth: {depth} blocks of a format-1 spec whose DAFF class-token "
                                            rf"re-weighting the upgrade removes block by block; it does so for at "
                                            rf"most {MAX_UPGRADE_DEPTH} \(give the spec in format {VERSION}\)$"):
            upgrade(v1_dhvt(depth=depth, **changes))
    for depth, message in ((2**40, "must be <= 2147483647"), (0, "must be >= 1"), (True, "must be int")):
        with pytest.raises(SpecError, match=f"^depth: {message}"):
            from_dict(v1_dhvt(depth=depth, **changes))
    assert time.perf_counter() - t0 < 5
    data, dropped = upgrade(v1_dhvt(depth=40, **changes))  # a deep model within the bound upgrades as before
    spec = from_dict(data)
    changed = [i for i, b in enumerate(spec.blocks) if b.ffn.cls == "identity"]
    assert changed == ([39] if "class_token" not in changes else list(range(40)))
    assert len(dropped) == 2 * len(changed)


def test_upgrade_of_a_huge_depth_without_dead_weights_stays_repeated():
    """Nothing to change per block (a DAFF whose class token the head reads): no bound, no list."""
    data, dropped = upgrade(v1_dhvt(depth=2**31 - 1))
    assert data["depth"] == 2**31 - 1 and isinstance(data["block"], dict) and dropped == []
