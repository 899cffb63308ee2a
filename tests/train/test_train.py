"""tools/train.py and tools/eval.py: DDP on the CPU, exact resume after SIGKILL and SIGTERM, atomic
checkpoints, mixup / cutmix, multi-output heads, outputs on disk, one-line errors."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import vspec
from tests.helpers.image_runs import args, assert_same_weights, env, weights
from vspec.cli.eval import main as eval_main
from vspec.cli.train import main as train_main
from vspec.train import checkpoints, files
from vspec.weights.checkpoint import read

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


def test_a_bogus_mplbackend_does_not_stop_the_curves(tiny_spec, tmp_path):
    """The curves are files (Agg): a MPLBACKEND naming no backend, in train.py's own process, is not read."""
    out = tmp_path / "run"
    done = subprocess.run([PY, str(ROOT / "tools/train.py"), *args(tiny_spec, out, "--epochs", "1")],
                          env=dict(env(), MPLBACKEND="bogus"), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (out / "curves.png").stat().st_size > 1000


@pytest.mark.slow  # two runs, ~20 s: make test-slow
def test_vspec_train_and_tools_train_give_identical_runs(tiny_spec, tmp_path):
    """The same arguments to `vspec train` (the installed command) and to tools/train.py, each in its own process:
    the same weights, the same records (timings aside), and `vspec eval` / tools/eval.py print the same result."""
    outs = {"vspec": tmp_path / "vspec", "tools": tmp_path / "tools"}
    commands = {"vspec": [str(Path(PY).with_name("vspec")), "train"], "tools": [PY, str(ROOT / "tools/train.py")]}
    for how, out in outs.items():
        done = subprocess.run([*commands[how], *args(tiny_spec, out, "--epochs", "2")], env=env(),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    assert_same_weights(weights(outs["vspec"] / "last.pt"), weights(outs["tools"] / "last.pt"))
    timings = ("images_per_s", "epoch_time_s")
    records = {how: [{k: v for k, v in json.loads(line).items() if k not in timings}
                     for line in (out / "metrics.jsonl").read_text().splitlines()] for how, out in outs.items()}
    assert records["vspec"] == records["tools"] and len(records["vspec"]) == 2
    evaluate = ["--data", "synthetic", "--synthetic-size", "64", "--seed", "3", "--json"]
    results = [json.loads(subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=300,
                                         check=True).stdout)
               for cmd in ([str(Path(PY).with_name("vspec")), "eval", str(outs["vspec"] / "last.pt"), *evaluate],
                           [PY, str(ROOT / "tools/eval.py"), str(outs["tools"] / "last.pt"), *evaluate])]
    assert [{k: v for k, v in r.items() if k != "images_per_s"} for r in results][0] == \
           [{k: v for k, v in r.items() if k != "images_per_s"} for r in results][1]


def test_outputs_metrics_curves_and_eval(tiny_spec, tmp_path, capsys):
    out = tmp_path / "run"
    assert train_main(args(tiny_spec, out, "--epochs", "2")) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [1, 2]
    for key in ("epoch", "train_loss", "val_loss", "val_top1", "val_top5", "lr", "images_per_s"):
        assert all(key in r for r in lines)
    assert (out / "curves.png").stat().st_size > 1000 and (out / "best.pt").is_file()
    ckpt = checkpoints.load(out / "last.pt")
    assert ckpt["epoch"] == 2 and ckpt["batches_done"] == 0 and ckpt["global_step"] == 8
    model = vspec.load(out / "last.pt")  # a training checkpoint rebuilds like any vspec checkpoint
    assert model.spec.num_classes == 4
    capsys.readouterr()
    assert eval_main([str(out / "last.pt"), "--data", "synthetic", "--synthetic-size", "64", "--seed", "3",
                      "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert abs(result["top1"] - lines[-1]["val_top1"]) < 1e-6 and result["images"] == 16


def test_ddp_two_processes_end_in_sync(tiny_spec, tmp_path):
    out = tmp_path / "ddp"
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=2", str(ROOT / "tools/train.py"),
           *args(tiny_spec, out, "--epochs", "2")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env())
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["ranks_in_sync"] is True
    # the global batch of 16 is split over the two ranks: 64 images / 16 = 4 steps an epoch
    assert checkpoints.load(out / "last.pt")["global_step"] == 8


def _wait_for(path, predicate, proc, timeout=240):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if path.is_file():
            try:
                if predicate(checkpoints.load(path)):
                    return True
            except Exception:  # noqa: BLE001 - the file may be replaced while we read it
                pass
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigkill_after_epoch", "sigterm_mid_epoch"])
def test_interrupted_then_resumed_equals_uninterrupted(tiny_spec, tmp_path, how):
    extra = ("--epochs", "4", "--synthetic-size", "256")
    ref = tmp_path / "ref"
    assert subprocess.run([PY, str(ROOT / "tools/train.py"), *args(tiny_spec, ref, *extra)], env=env(),
                          capture_output=True, timeout=300).returncode == 0
    out = tmp_path / "cut"
    proc = subprocess.Popen([PY, str(ROOT / "tools/train.py"), *args(tiny_spec, out, *extra)], env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if how == "sigkill_after_epoch":
        assert _wait_for(out / "last.pt", lambda c: c["epoch"] >= 1, proc), "no checkpoint before the run ended"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    else:
        assert _wait_for(out / "last.pt", lambda c: c["epoch"] >= 1, proc), "no checkpoint before the run ended"
        time.sleep(0.3)  # somewhere inside epoch 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    cut = checkpoints.load(out / "last.pt")
    assert cut["epoch"] < 4  # the run was really interrupted
    resumed = subprocess.run([PY, str(ROOT / "tools/train.py"), *args(tiny_spec, out, *extra), "--resume"],
                             env=env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_same_weights(weights(ref / "last.pt"), weights(out / "last.pt"))
    assert checkpoints.load(out / "last.pt")["global_step"] == checkpoints.load(ref / "last.pt")["global_step"]


def test_crash_while_saving_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    files.atomic_save({"format": checkpoints.FORMAT, "value": torch.tensor([1.0])}, path)

    def torn_save(obj, f):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoints.torch, "save", torn_save)
    with pytest.raises(OSError, match="disk full"):
        files.atomic_save({"format": checkpoints.FORMAT, "value": torch.tensor([2.0])}, path)
    assert torch.equal(read(path)["value"], torch.tensor([1.0]))
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary file left behind


def test_rng_state_round_trip_through_weights_only(tmp_path):
    checkpoints.seed_everything(5)
    state = checkpoints.rng_state()
    files.atomic_save({"format": checkpoints.FORMAT, "rng": state}, tmp_path / "r.pt")
    expected = (torch.rand(3), __import__("numpy").random.rand(2), __import__("random").random())
    checkpoints.seed_everything(99)
    checkpoints.set_rng_state(read(tmp_path / "r.pt")["rng"])
    got = (torch.rand(3), __import__("numpy").random.rand(2), __import__("random").random())
    assert torch.equal(expected[0], got[0]) and (expected[1] == got[1]).all() and expected[2] == got[2]


def test_deit_recipe_mixup_cutmix_randaugment_and_accumulation(tiny_spec, tmp_path):
    out = tmp_path / "deit"
    code = train_main(args(tiny_spec, out, "--recipe", "deit", "--epochs", "1", "--accum-steps", "2",
                           "--clip-grad", "1.0", "--ema-decay", "0.9"))
    assert code == 0
    ckpt = checkpoints.load(out / "last.pt")
    assert ckpt["recipe"]["mixup"] == 0.8 and ckpt["recipe"]["cutmix"] == 1.0
    assert ckpt["recipe"]["auto_augment"] == "rand-m9-mstd0.5-inc1" and ckpt["ema"] is not None
    assert ckpt["global_step"] == 4  # 64 images in micro-batches of 8, two per optimizer step
    assert vspec.from_json(ckpt["spec"]).drop_path == 0.1  # the recipe's drop path reached the spec


def test_late_fusion_head_trains_on_the_sum_of_losses(tmp_path):
    spec = vspec.override(vspec.load_spec(ROOT / "specs/deit_tiny.py"),
                          {"depth": 1, "dim": 32, "block.attention.heads": 2, "img_size": 16, "embedder.patch_size": 4,
                           "num_classes": 4, "head.kind": "second_order", "head.fusion": "late", "head.pool.heads": 2,
                           "head.pool.m": 4, "head.pool.n": 4})
    path = tmp_path / "late.json"
    path.write_text(vspec.to_json(spec))
    out = tmp_path / "late"
    assert train_main(args(path, out, "--epochs", "1")) == 0
    assert json.loads((out / "metrics.jsonl").read_text())["val_top1"] >= 0


@pytest.mark.parametrize("argv,needle", [
    (["--epochs", "0"], "--epochs: must be in [1, 100000], got 0"),
    (["--recipe", "sota"], "invalid choice: 'sota'"),
    (["--data", "mnist"], "invalid choice: 'mnist'"),
    (["--resume"], "--resume: no"),
    (["--batch-size", "1000"], "1000 per rank is more than the 64 training samples"),
    (["--set", "block.attention.heads=5"], "block.attention.heads: 5 does not divide dim 32"),
    (["--lr", "abc"], "invalid float value"),
    (["--decode-in", "workers"], "--decode-in: 'workers' says who decodes on the device: give decode_on 'device'"),
])
def test_bad_arguments_are_one_line_errors(tiny_spec, tmp_path, capsys, argv, needle):
    assert train_main(args(tiny_spec, tmp_path / "bad", *argv)) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and err.startswith("train.py: error:")


def test_eval_errors(tmp_path, capsys):
    assert eval_main([str(tmp_path / "none.pt"), "--data", "digits"]) == 2
    assert "no such checkpoint" in capsys.readouterr().err


@pytest.mark.slow  # ~28 s: trains the demo to its accuracy
def test_demo_spec_learns_digits(tmp_path):
    """`make demo`'s spec and data, shortened to 3 epochs: already above 90 % validation top-1."""
    out = tmp_path / "demo"
    assert train_main([str(ROOT / "specs/demo_digits.py"), "--data", "digits", "--out", str(out), "--epochs", "3",
                       "--batch-size", "64", "--device", "cpu"]) == 0
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["val_top1"] >= 90.0


def test_a_hierarchical_body_trains_and_resumes(tmp_path):
    """Swin's parts (window attention, patch merging, no class token) through the training engine."""
    spec = vspec.override(vspec.load_spec(ROOT / "specs/swin_tiny.py"),
                          {"img_size": 32, "stages": [
                              {"depth": 2, "dim": 16, "block": {"kind": "pre_norm", "attention": {
                                  "kind": "window_mhsa", "heads": 2, "window": 4}}},
                              {"depth": 2, "dim": 32, "block": {"kind": "pre_norm", "attention": {
                                  "kind": "window_mhsa", "heads": 4, "window": 4}},
                               "entry": {"kind": "patch_merging"}}], "num_classes": 4})
    path = tmp_path / "swin.json"
    path.write_text(vspec.to_json(spec))
    out = tmp_path / "run"
    assert train_main(args(path, out, "--epochs", "1")) == 0
    assert train_main(args(path, out, "--epochs", "2", "--resume")) == 0
    ckpt = checkpoints.load(out / "last.pt")
    assert ckpt["epoch"] == 2 and vspec.from_json(ckpt["spec"]).stages[1].entry is not None
    model = vspec.load(out / "last.pt")
    assert any(k.startswith("stages.1.entry.") for k in model.state_dict())


def test_a_run_normalised_on_the_device_trains_as_one_normalised_by_the_workers(tiny_spec, tmp_path):
    """--normalise-on device (CUDA's default: uint8 batches normalised where the model runs) and host give the
    same run: the losses and accuracies of every epoch agree to float rounding."""
    records = {}
    for where in ("host", "device"):
        out = tmp_path / where
        assert train_main(args(tiny_spec, out, "--epochs", "2", "--recipe", "none", "--normalise-on", where)) == 0
        records[where] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(records["host"]) == len(records["device"]) == 2
    for a, b in zip(records["host"], records["device"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-5) and a["val_top1"] == b["val_top1"]


def test_the_adamw_kernel_is_the_runs_own_after_a_resume(tiny_spec, tmp_path):
    """--adamw: the CPU's default is foreach; a fused run (asked for, as CUDA's default) resumed with foreach goes on
    with foreach (torch would keep the checkpoint's choice), its step counts back on the host, and the reverse."""
    out = tmp_path / "run"

    def groups():
        ckpt = checkpoints.load(out / "last.pt")["optimizer"]
        return {(g["fused"], g["foreach"]) for g in ckpt["param_groups"]}, {s["step"].device.type
                                                                             for s in ckpt["state"].values()}

    assert train_main(args(tiny_spec, out, "--epochs", "1")) == 0
    assert groups()[0] == {(None, None)}
    assert train_main(args(tiny_spec, out, "--epochs", "2", "--adamw", "fused", "--resume")) == 0
    assert groups() == ({(True, None)}, {"cpu"})  # the parameters' device
    assert train_main(args(tiny_spec, out, "--epochs", "3", "--adamw", "foreach", "--resume")) == 0
    assert groups() == ({(None, None)}, {"cpu"})
    assert checkpoints.load(out / "last.pt")["global_step"] == 12
