"""vspec/train/setup.py: a run's setup as functions that return what they make; the spec settled once (the recipe
applied, num_classes the data set's, the checkpoint's on --resume) before the task is made, which holds that spec.
`Training`'s public steps (setup, batches, train_step, train), the only ones the benchmarks call. The precision:
--precision auto by the CPU's native bf16 (`native_bf16` monkeypatched both ways: never the CPU at hand's), said
first, recorded in summary.json and last.pt, kept on --resume; bf16 runs are bit-identical reruns."""

import json
import re
import signal
from pathlib import Path

import pytest
import torch

from tests.helpers.image_runs import args, assert_same_weights, weights
from vspec import Model, to_json
from vspec.cli.train import main as train_main
from vspec.ops import precision as cpu_precision
from vspec.spec import MHSA, MLP, Block, PatchEmbed
from vspec.train import RunConfig, TrainConfig, checkpoints, faults, resolve
from vspec.train.engine import Training
from vspec.train.setup import run_precision


def _tiny(**changes) -> Model:
    """8 x 8 grey digits, patch 4, one block of width 16."""
    fields = dict(embedder=PatchEmbed(patch_size=4), block=Block(attention=MHSA(heads=2), ffn=MLP(ratio=2.0)),
                  depth=1, dim=16, num_classes=3, img_size=8, in_chans=1)
    return Model(**{**fields, **changes})


def test_the_task_holds_the_final_spec(tmp_path, capsys):
    """digits has 10 classes, the spec asks 3; the recipe sets a drop-path rate: the task is made with the spec the
    model is built from, both settled."""
    t = Training(TrainConfig(_tiny(), resolve("deit"), "digits", RunConfig(out=tmp_path / "run", device="cpu")))
    assert t.setup(model=False)
    assert "digits has 10 classes; setting num_classes = 10" in capsys.readouterr().err
    assert t.spec.num_classes == 10 and t.spec.drop_path == 0.1  # deit's 0.1, the spec's 0.0
    assert t.task.spec is t.spec


PUBLIC = {"setup", "batches", "train_step", "train"}


def test_the_public_steps_drive_a_run(tmp_path):
    """setup, then an epoch's batches and a step on each: the loss of every batch, an optimizer step each."""
    t = Training(TrainConfig(_tiny(), resolve("none", batch_size=32), "digits",
                             RunConfig(out=tmp_path / "run", device="cpu", workers=0)))
    assert t.setup()
    steps = [t.train_step(i, inputs, target) for i, (inputs, target) in zip(range(3), t.batches(0))]
    assert [stepped for _, stepped in steps] == [True] * 3 and t.state.global_step == 3
    assert all(loss.shape == () and torch.isfinite(loss) for loss, _ in steps)


def test_the_benchmarks_call_only_the_public_steps():
    root = Path(__file__).resolve().parents[2] / "benchmarks"
    called = {m for path in root.glob("*.py") if "Training(" in path.read_text()
              for m in re.findall(r"\bt\.(\w+)\(", path.read_text())}
    assert called and called <= PUBLIC, called - PUBLIC


CPU = torch.device("cpu")
AMX = "precision: bf16 autocast (auto: this CPU computes bf16 natively: AMX)"
NONE = "precision: fp32 (auto: no native bf16 on this CPU)"


@pytest.fixture
def tiny_file(tmp_path) -> Path:
    """`_tiny()`'s file: its runs cost little where bf16 is emulated."""
    path = tmp_path / "tiny.json"
    path.write_text(to_json(_tiny(num_classes=4)))
    return path


@pytest.fixture
def native(monkeypatch):
    """native(value): what `native_bf16` reports for the rest of the test ("AMX", "AVX-512 BF16" or None)."""
    return lambda value: monkeypatch.setattr(cpu_precision, "native_bf16", lambda: value)


def test_auto_picks_bf16_where_the_cpu_computes_it_natively(tmp_path, native):
    auto, out = RunConfig(out=tmp_path), tmp_path
    for found, line in [("AMX", AMX), ("AVX-512 BF16", AMX.replace("AMX", "AVX-512 BF16")), (None, NONE)]:
        native(found)
        assert run_precision(auto, CPU) == ("bf16" if found else "fp32", line)
        assert run_precision(auto, torch.device("cuda", 0)) == ("bf16", "precision: bf16 autocast (auto: CUDA)")
        assert run_precision(RunConfig(out=out, precision="fp32"), CPU) == ("fp32", "precision: fp32 (--precision "
                                                                                    "fp32)")
        assert run_precision(RunConfig(out=out, precision="fp16"), CPU)[1] == ("precision: fp16 autocast with a grad "
                                                                               "scaler (--precision fp16)")
    assert run_precision(RunConfig(out=out, precision="bf16"), CPU) == (
        "bf16", "precision: bf16 autocast (--precision bf16; no native bf16 on this CPU: emulated, slower than fp32)")


def test_a_resume_keeps_the_checkpoints_precision_and_says_so(tmp_path, native):
    """Whatever auto would pick now; a checkpoint that records none (an earlier release's) resolves as a fresh run."""
    auto = RunConfig(out=tmp_path)
    native(None)
    assert run_precision(auto, CPU, {"precision": "bf16"}) == (
        "bf16", "precision: bf16 autocast (the run's, from its checkpoint; auto would pick fp32 here: no native bf16 "
                "on this CPU)")
    assert run_precision(RunConfig(out=tmp_path, precision="bf16"), CPU, {"precision": "bf16"})[1].endswith(
        "emulated, slower than fp32, the run's, from its checkpoint)")
    native("AMX")
    assert run_precision(auto, CPU, {"precision": "bf16"}) == (
        "bf16", "precision: bf16 autocast (the run's, from its checkpoint; auto: this CPU computes bf16 natively: AMX)")
    assert run_precision(auto, CPU, {"precision": "fp32"})[0] == "fp32"
    assert run_precision(auto, CPU, {}) == ("bf16", AMX[:-1] + "; its checkpoint does not record the run's)")


def _said(err: str) -> list[str]:
    """A run's stderr without the notes and the progress lines."""
    return [line for line in err.splitlines() if not line.startswith(("note: ", "epoch "))]


def _run(spec, out, capsys, *extra) -> list[str]:
    capsys.readouterr()
    assert train_main(args(spec, out, "--epochs", "1", "--synthetic-size", "32", *extra)) == 0
    return _said(capsys.readouterr().err)


def test_auto_trains_as_its_choice_says_first_and_records_it(tiny_file, tmp_path, native, capsys):
    """auto on a CPU with native bf16 (monkeypatched) trains what --precision bf16 does, bit for bit (a rerun of the
    same seed in bf16: the same weights), not what fp32 does; on one without, what fp32 does. The choice is the run's
    first line, and summary.json and last.pt hold it."""
    fp32, bf16 = tmp_path / "fp32", tmp_path / "bf16"
    assert _run(tiny_file, fp32, capsys, "--precision", "fp32")[0] == "precision: fp32 (--precision fp32)"
    assert _run(tiny_file, bf16, capsys, "--precision", "bf16")[0].startswith("precision: bf16 autocast (--precision "
                                                                             "bf16")
    for found, line, same in [("AMX", AMX, bf16), (None, NONE, fp32)]:
        native(found)
        out = tmp_path / f"auto-{found}"
        assert _run(tiny_file, out, capsys)[0] == line
        assert json.loads((out / "summary.json").read_text())["precision"] == same.name
        assert checkpoints.load(out / "last.pt")["precision"] == same.name
        assert_same_weights(weights(same / "last.pt"), weights(out / "last.pt"))
    a, b = weights(fp32 / "last.pt"), weights(bf16 / "last.pt")
    assert any(not torch.equal(a[k], b[k]) for k in a)  # bf16 autocast did run


def test_a_bf16_run_stopped_mid_epoch_resumes_in_bf16_on_a_cpu_without(tiny_file, tmp_path, native, capsys,
                                                                        monkeypatch):
    """auto resolved to bf16 (native, monkeypatched), SIGTERM after step 3 of 4 (2 epochs of 2); resumed where
    detection says no native bf16: the run says it keeps bf16 and ends with the weights of an uninterrupted
    --precision bf16 run, bit for bit; --precision fp32 on resuming it is refused in one line."""
    ref, out, two = tmp_path / "ref", tmp_path / "cut", ("--epochs", "2", "--synthetic-size", "32")
    assert train_main(args(tiny_file, ref, *two, "--precision", "bf16")) == 0
    native("AMX")
    monkeypatch.setattr(faults, "_passes", {})
    monkeypatch.setenv("VSPEC_TEST_KILL_AT", "step:3:TERM")
    assert train_main(args(tiny_file, out, *two)) == 128 + signal.SIGTERM
    monkeypatch.delenv("VSPEC_TEST_KILL_AT")
    assert checkpoints.load(out / "last.pt")["precision"] == "bf16"
    native(None)
    capsys.readouterr()
    assert train_main(args(tiny_file, out, *two, "--resume", "--precision", "fp32")) == 2
    assert capsys.readouterr().err.strip() == (
        f"train.py: error: {out / 'last.pt'}: --resume of a different run (this run != the checkpoint): --precision "
        "fp32 != bf16; resume with the checkpoint's spec, data and precision flags, or train into a new --out")
    assert checkpoints.load(out / "last.pt")["batches_done"] == 1  # mid-epoch
    assert train_main(args(tiny_file, out, *two, "--resume")) == 0
    assert _said(capsys.readouterr().err)[0] == ("precision: bf16 autocast (the run's, from its checkpoint; auto would "
                                                 "pick fp32 here: no native bf16 on this CPU)")
    assert json.loads((out / "summary.json").read_text())["precision"] == "bf16"
    assert_same_weights(weights(ref / "last.pt"), weights(out / "last.pt"))
