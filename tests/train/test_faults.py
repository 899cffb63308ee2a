"""Training faults: SIGKILL at any point (crash-test hook VSPEC_TEST_KILL_AT, see
vspec.train.faults.kill_point), a full disk, a diverging loss, flags out of range, a finished or
used run folder."""

import errno
import json
import math
import os
import re
import signal
import subprocess
import sys

import pytest
import torch

import vspec
import vspec.weights.checkpoint
from tests.helpers import ROOT
from tests.helpers.image_runs import args, assert_same_weights, env, weights  # noqa: F401 - tiny_spec is a fixture
from vspec.cli.eval import eval_parser
from vspec.cli.eval import main as eval_main
from vspec.cli.train import main as train_main
from vspec.cli.train import train_parser
from vspec.train import checkpoints, engine, faults, files
from vspec.train.data.loader import build_loaders
from vspec.train.data.registry import DataError
from vspec.train.validators import MAX_WORKERS

TEMP = re.compile(r"\..*\.tmp-\d+")


def errors(err):
    """stderr without the progress lines and the precision line"""
    return [line for line in err.splitlines() if not line.startswith(("epoch ", "precision: "))]


def temps(out):
    return sorted(p.name for p in out.iterdir() if TEMP.fullmatch(p.name))


def epochs_in(out):
    return [json.loads(line)["epoch"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def train(spec, out, *extra, kill_at=None):
    e = dict(env(), VSPEC_TEST_KILL_AT=kill_at) if kill_at else env()
    return subprocess.Popen([sys.executable, str(ROOT / "tools/train.py"), *args(spec, out, "--epochs", "3", *extra)],
                            env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_sigkill_anywhere_then_resume_equals_an_uninterrupted_run(tiny_spec, tmp_path):
    """Killed inside the first best.pt write, mid-epoch, between last.pt and metrics.jsonl, and inside a
    last.pt write: each --resume goes on, and the end equals the uninterrupted run."""
    ref = train(tiny_spec, tmp_path / "ref")  # runs beside the interrupted chain
    out = tmp_path / "cut"

    def killed(*extra, kill_at):
        proc = train(tiny_spec, out, *extra, kill_at=kill_at)
        assert proc.wait(timeout=300) == -9, proc.stderr.read()[-3000:]

    # atomic writes, counted per process: epoch end = last.pt, best.pt (when better), metrics.jsonl;
    # a resumed run first rewrites metrics.jsonl
    killed(kill_at="write:2")  # inside epoch 1's best.pt copy
    assert checkpoints.load(out / "last.pt")["epoch"] == 1 and not (out / "best.pt").exists()
    assert len(temps(out)) == 1 and temps(out)[0].startswith(".best.pt.tmp-")
    killed("--resume", kill_at="step:3")  # mid epoch 2, no save
    assert (out / "best.pt").is_file() and epochs_in(out) == [1] and temps(out) == []
    killed("--resume", kill_at="written:2")  # epoch 2's last.pt is in place, metrics.jsonl not yet
    assert checkpoints.load(out / "last.pt")["epoch"] == 2 and epochs_in(out) == [1]
    killed("--resume", kill_at="write:2")  # inside epoch 3's last.pt write
    assert checkpoints.load(out / "last.pt")["epoch"] == 2 and len(temps(out)) == 1 and epochs_in(out) == [1, 2]
    done = train(tiny_spec, out, "--resume")
    assert done.wait(timeout=300) == 0, done.stderr.read()[-3000:]
    assert ref.wait(timeout=300) == 0, ref.stderr.read()[-3000:]

    ref = tmp_path / "ref"
    assert_same_weights(weights(ref / "last.pt"), weights(out / "last.pt"))
    assert_same_weights(weights(ref / "best.pt"), weights(out / "best.pt"))
    assert epochs_in(out) == [1, 2, 3] == epochs_in(ref)
    for got, want in zip(*(map(json.loads, (o / "metrics.jsonl").read_text().splitlines()) for o in (out, ref))):
        assert all(got[k] == want[k] for k in ("train_loss", "val_loss", "val_top1", "lr", "step")), (got, want)
    assert temps(out) == []


def test_sigterm_mid_epoch_keeps_the_whole_epochs_loss_and_progress(tiny_spec, tmp_path, monkeypatch, capsys):
    ref = tmp_path / "ref"
    assert train_main(args(tiny_spec, ref, "--epochs", "1")) == 0
    out = tmp_path / "cut"
    monkeypatch.setattr(faults, "_passes", {})
    monkeypatch.setenv("VSPEC_TEST_KILL_AT", "step:2:TERM")  # stop after step 2 of 4
    capsys.readouterr()
    assert train_main(args(tiny_spec, out, "--epochs", "1")) == 128 + signal.SIGTERM  # returned, not sys.exit
    assert capsys.readouterr().err.splitlines()[-1] == (f"signal {int(signal.SIGTERM)}: saved {out / 'last.pt'} at "
                                                        "epoch 1, batch 2; continue with --resume")
    assert checkpoints.load(out / "last.pt")["batches_done"] == 2
    monkeypatch.delenv("VSPEC_TEST_KILL_AT")
    capsys.readouterr()
    assert train_main(args(tiny_spec, out, "--epochs", "1", "--resume")) == 0
    bars = [tuple(map(int, m)) for m in re.findall(r"\] (\d+)/(\d+)\b", capsys.readouterr().err)]
    assert bars and all(total == 4 and done <= total for done, total in bars) and bars[-1] == (4, 4)
    assert epochs_in(out) == [1]
    assert (json.loads((out / "metrics.jsonl").read_text())["train_loss"]
            == json.loads((ref / "metrics.jsonl").read_text())["train_loss"])


def test_augmenting_workers_resume_exactly_and_train_as_the_main_process(tiny_spec, tmp_path, monkeypatch):
    """RandAugment, random erasing and random resized crops drawn in 2 loader workers (mixup in the main process), 2
    epochs of 4 steps: stopped by SIGTERM after step 3 and resumed (fresh workers, mid-epoch, then a whole epoch),
    the weights of the uninterrupted run bit for bit; and those of a run whose main process reads the data
    (--workers 0): each sample draws from (seed, epoch, index), whoever reads it."""
    augment = ("--epochs", "2", "--auto-augment", "rand-m9-mstd0.5-inc1", "--re-prob", "0.5", "--random-resized-crop",
               "--mixup", "0.8")
    ref, out, alone = tmp_path / "ref", tmp_path / "cut", tmp_path / "alone"
    assert train_main(args(tiny_spec, ref, *augment, "--workers", "2")) == 0
    monkeypatch.setattr(faults, "_passes", {})
    monkeypatch.setenv("VSPEC_TEST_KILL_AT", "step:3:TERM")
    assert train_main(args(tiny_spec, out, *augment, "--workers", "2")) == 128 + signal.SIGTERM
    monkeypatch.delenv("VSPEC_TEST_KILL_AT")
    assert checkpoints.load(out / "last.pt")["batches_done"] == 3
    assert train_main(args(tiny_spec, out, *augment, "--workers", "2", "--resume")) == 0
    assert_same_weights(weights(ref / "last.pt"), weights(out / "last.pt"))
    assert train_main(args(tiny_spec, alone, *augment, "--workers", "0")) == 0
    assert_same_weights(weights(ref / "last.pt"), weights(alone / "last.pt"))


def test_resuming_a_finished_run_says_so_and_keeps_its_summary(tiny_spec, tmp_path, capsys):
    out = tmp_path / "run"
    assert train_main(args(tiny_spec, out, "--epochs", "1")) == 0
    summary, metrics = (out / "summary.json").read_bytes(), (out / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    assert train_main(args(tiny_spec, out, "--epochs", "1", "--resume")) == 0
    said = capsys.readouterr()
    assert said.out.count("\n") == 1 and "the run is finished" in said.out and "nan" not in said.out + said.err
    assert (out / "summary.json").read_bytes() == summary and (out / "metrics.jsonl").read_bytes() == metrics


@pytest.mark.parametrize("kill_at,fmt,left", [("write:4:INT", "pt", ["summary.json"]),
                                               ("written:3:TERM", "folder", ["final", "curves.png", "summary.json"])])
def test_a_signal_during_the_end_of_run_writes_is_the_line_and_resume_writes_the_rest(tiny_spec, tmp_path, capsys,
                                                                                      kill_at, fmt, left):
    """SIGINT inside the atomic write of curves.png (writes 1-3: last.pt, best.pt, metrics.jsonl), or SIGTERM right
    after metrics.jsonl: exit 128 + N with the line saying what is not written, no traceback; --resume of the
    finished run writes the rest from last.pt (the model folder's weights last.pt's) and says so in one line."""
    out, signum = tmp_path / "run", getattr(signal, "SIG" + kill_at.split(":")[2])
    flags = args(tiny_spec, out, "--epochs", "1", "--save-format", fmt)
    done = subprocess.run([sys.executable, str(ROOT / "tools/train.py"), *flags], capture_output=True, text=True,
                          env=dict(env(), VSPEC_TEST_KILL_AT=kill_at), timeout=300)
    line = f"signal {int(signum)}: saved {out / 'last.pt'} at the end of the run (epoch 1); {', '.join(left)} not " \
           "written: --resume writes them"
    assert done.returncode == 128 + signum and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert [s for s in errors(done.stderr) if not s.startswith("note: ")] == [line]
    ends = {"final": out / "final" / "config.json", "curves.png": out / "curves.png",  # END_FILES, in order
            "summary.json": out / "summary.json"}
    assert [name for name, path in ends.items() if not path.exists()] == ["final"] * (fmt == "pt") + left
    capsys.readouterr()
    assert train_main([*flags, "--resume"]) == 0
    said = capsys.readouterr().out
    assert said == f"{out}: the run is finished (1 epochs, 4 steps); wrote its missing {', '.join(left)}\n"
    assert [name for name, path in ends.items() if not path.exists()] == ["final"] * (fmt == "pt")
    summary, record = json.loads((out / "summary.json").read_text()), json.loads((out / "metrics.jsonl").read_text())
    assert (summary["final"], summary["score"], summary["epochs"], summary["ranks_in_sync"]) == (record, "val_top1", 1,
                                                                                                True)
    if fmt == "folder":
        assert_same_weights(vspec.from_pretrained(out / "final").state_dict(), weights(out / "last.pt"))
    assert train_main([*flags, "--resume"]) == 0
    assert "nothing to resume, summary.json is left as it was" in capsys.readouterr().out


class FullDisk:
    """A file whose writes fail with ENOSPC after `room` bytes, as on a full disk."""

    def __init__(self, f, room):
        self.f, self.room = f, room

    def write(self, b):
        if len(b) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(b)
        return self.f.write(b)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def full_disk(monkeypatch, room=1000, only="last.pt"):
    def fake_open(path, mode="r", *a, **kw):
        f = open(path, mode, *a, **kw)
        return FullDisk(f, room) if "w" in mode and only in str(path) else f

    monkeypatch.setattr(files, "open", fake_open, raising=False)


@pytest.mark.parametrize("room", [0, 1000])  # fails in torch's first write (OSError) or a later one (RuntimeError)
def test_full_disk_keeps_the_previous_checkpoint_and_says_so(tmp_path, monkeypatch, room):
    path = tmp_path / "last.pt"
    files.atomic_save({"format": checkpoints.FORMAT, "value": torch.tensor([1.0])}, path)
    full_disk(monkeypatch, room)
    with pytest.raises(files.SaveError, match=rf"^cannot write {re.escape(str(path))}: no space left on device; the "
                                          "previous last.pt is kept$"):
        files.atomic_save({"format": checkpoints.FORMAT, "value": torch.zeros(10_000)}, path)
    assert torch.equal(vspec.weights.checkpoint.read(path)["value"], torch.tensor([1.0])) and temps(tmp_path) == []


def test_full_disk_during_training_is_one_line(tiny_spec, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    assert train_main(args(tiny_spec, out, "--epochs", "1")) == 0
    full_disk(monkeypatch)
    capsys.readouterr()
    assert train_main(args(tiny_spec, out, "--epochs", "2", "--resume")) == 2
    err = errors(capsys.readouterr().err)
    assert len(err) == 1 and err[0].endswith("no space left on device; the previous last.pt is kept"), err
    assert checkpoints.load(out / "last.pt")["epoch"] == 1 and temps(out) == [] and epochs_in(out) == [1]


@pytest.mark.parametrize("loss_every", [None, 3])
def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tiny_spec, tmp_path, monkeypatch,
                                                                             capsys, loss_every):
    """Also with the losses read on the host every 3 batches (as on CUDA, every 32): reported at its own step."""
    import attrs

    import vspec.cli.train as cli

    def with_loss_every(cfg):
        return attrs.evolve(cfg, run=attrs.evolve(cfg.run, loss_every=loss_every))

    real_config = cli.config_from_args
    monkeypatch.setattr(cli, "config_from_args", lambda *a, **k: with_loss_every(real_config(*a, **k)))
    calls = []
    real = engine.head_loss

    def diverging(criterion, outputs, target, **options):  # finite for epoch 1 (4 steps), then NaN from step 6 on
        calls.append(1)
        return real(criterion, outputs, target, **options) * (math.nan if len(calls) >= 6 else 1.0)

    monkeypatch.setattr(engine, "head_loss", diverging)
    out = tmp_path / "run"
    assert train_main(args(tiny_spec, out, "--epochs", "3")) == 2
    err = errors(capsys.readouterr().err)
    assert err == [f"train.py: error: the loss is nan at step 6 (epoch 2, batch 2): stopped; the last good "
                   f"checkpoint is {out / 'last.pt'}"]
    ckpt = checkpoints.load(out / "last.pt")
    assert ckpt["epoch"] == 1 and all(torch.isfinite(t).all() for t in ckpt["state_dict"].values())
    assert epochs_in(out) == [1] and not (out / "summary.json").exists()


# Every numeric flag: values outside its range (and non-finite floats), and values on its edges that pass.
FLAGS = {
    "--epochs": (["0", "-1", "100001", str(2**70)], ["1", "100000"]),
    "--batch-size": (["0", "-1"], ["1"]),
    "--lr": (["0", "-0.001", "inf", "nan"], ["1e-9"]),
    "--weight-decay": (["-0.1", "nan", "inf"], ["0"]),
    "--warmup-epochs": (["-1", "100001"], ["0", "100000"]),
    "--warmup-lr": (["-1", "nan", "inf"], ["0"]),
    "--min-lr": (["-1", "nan", "inf"], ["0"]),
    "--drop-path": (["-0.1", "1", "nan"], ["0", "0.99"]),
    "--mixup": (["-1", "nan", "inf"], ["0"]),
    "--cutmix": (["-1", "nan", "inf"], ["0"]),
    "--smoothing": (["-0.1", "1", "1.5", "nan"], ["0", "0.99"]),
    "--re-prob": (["-0.1", "1.01", "nan"], ["0", "1"]),
    "--ema-decay": (["-0.1", "1", "1.5", "nan"], ["0", "0.9999"]),
    "--clip-grad": (["-1", "nan", "inf"], ["0"]),
    "--warmup-frac": (["-0.1", "1", "nan"], ["0", "0.99"]),
    "--accum-steps": (["0", "-1"], ["1"]),
    "--max-steps": (["0", "-1"], ["1"]),
    "--max-len": (["0", "-1"], ["1"]),
    "--workers": (["-1", str(MAX_WORKERS + 1), str(10**9)], ["0", str(MAX_WORKERS)]),  # 4 per core, at least 32
    "--prefetch": (["-1", "65"], ["0", "64"]),
    "--synthetic-size": (["0", "-1"], ["1"]),
    "--seed": (["-1", str(2**32)], ["0", str(2**32 - 1)]),
    "--log-interval": (["0", "-1", "nan", "inf"], ["0.5", "3600"]),
    "--loss-every": (["0", "-1"], ["1"]),
    "--cos-reg-component": (["-1", "10001"], ["0"]),
    "--mean": (["nan", "inf", "1e+308", "3.5e+38"], ["0.5", "-2", "1e+36"]),  # beyond float32; 255 x 1e36 fits
    "--std": (["0", "-1", "nan", "inf", "1e-50", "1e-39", "1e+39"], ["0.5", "2", "1e-30"]),
}
EVAL_FLAGS = {"--batch-size": (["0", "-1"], ["1"]),
              "--crop-pct": (["0", "-1", "nan", "inf", "1e-06", "0.2", "4.5", "1e+308"], ["0.25", "1.5", "4"]),
              "--img-size": (["0", "-1"], ["1"]),
              **{k: FLAGS[k] for k in ("--workers", "--synthetic-size", "--seed", "--max-len", "--mean", "--std")}}


def numeric_flags(parser):
    return {a.option_strings[0] for a in parser._actions if a.type in (int, float) and a.option_strings}


def test_the_tables_cover_every_numeric_flag():
    assert numeric_flags(train_parser()) == set(FLAGS)
    assert numeric_flags(eval_parser()) == set(EVAL_FLAGS)


def test_workers_are_bounded_by_the_cores():
    """--workers' most (train, eval, label, and build_loaders itself): 4 per core this process may run on, at least
    32; past it one line, before a worker forks (`--workers 1000000000` forked until the machine gave out)."""
    assert MAX_WORKERS == max(32, 4 * len(os.sched_getaffinity(0)))
    data = torch.utils.data.TensorDataset(torch.arange(4))
    with pytest.raises(DataError, match=f"workers: must be an int in \\[0, {MAX_WORKERS}\\]"):
        build_loaders(data, data, batch_size=2, workers=MAX_WORKERS + 1)


@pytest.mark.parametrize("flag,value", [(f, v) for f, (bad, _) in FLAGS.items() for v in bad])
def test_train_flag_out_of_range_is_one_line(tiny_spec, tmp_path, capsys, flag, value):
    assert train_main(args(tiny_spec, tmp_path / "bad", flag, value)) == 2
    err = capsys.readouterr().err
    shown = value if len(value) < 20 else "an int of"  # a huge int is shown by its size
    assert err.count("\n") == 1 and err.startswith(f"train.py: error: {flag}: must be ") and shown in err, err
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("flag,value", [(f, v) for f, (bad, _) in EVAL_FLAGS.items() for v in bad])
def test_eval_flag_out_of_range_is_one_line(tmp_path, capsys, flag, value):
    assert eval_main([str(tmp_path / "none.pt"), flag, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"eval.py: error: {flag}: must be ") and value in err, err


def test_flag_values_on_the_edges_pass(tiny_spec, tmp_path):
    from vspec.cli.eval import eval_rules
    from vspec.cli.train import check_flags, config_from_args

    for flag, (_, good) in FLAGS.items():
        text = ("--data", "rt-polarity") if flag == "--max-len" else ()  # a text data set's option
        for value in good:
            config_from_args(train_parser().parse_args(args(tiny_spec, tmp_path / "ok", flag, value, *text)))
    for flag, (_, good) in EVAL_FLAGS.items():
        for value in good:
            check_flags(eval_parser().parse_args(["x.pt", flag, value]), eval_rules(), "eval.py")


def test_stale_temp_files_of_our_own_are_removed(tiny_spec, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # a process that has ended
    ours = [f".last.pt.tmp-{pid}", f".best.pt.tmp-{pid}", f".metrics.jsonl.tmp-{pid}"]
    foreign = [".notes.txt.tmp-1", "last.pt.tmp-1", f".last.pt.tmp-{pid}x"]
    for name in ours + foreign:
        (out / name).write_bytes(b"partial")
    assert train_main(args(tiny_spec, out, "--epochs", "1", "--max-steps", "1")) == 0
    assert sorted(p.name for p in out.iterdir() if "tmp" in p.name) == sorted(foreign)


def test_a_signal_raises_interrupted_from_run_and_only_the_cli_exits(tiny_spec, tmp_path, monkeypatch):
    """The engine is library code: SIGINT mid-epoch saves last.pt and raises `Interrupted` out of `run`
    (with the signal, the message rank 0 reports); no SystemExit. train_main turns it into 128 + N."""
    from vspec.cli.train import config_from_args

    out = tmp_path / "cut"
    monkeypatch.setattr(faults, "_passes", {})
    monkeypatch.setenv("VSPEC_TEST_KILL_AT", "step:3:INT")
    cfg = config_from_args(train_parser().parse_args(args(tiny_spec, out, "--epochs", "1")))
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(engine.Interrupted) as caught:
        engine.run(cfg)
    assert caught.value.signum == signal.SIGINT and caught.value.report
    assert str(caught.value) == (f"signal {int(signal.SIGINT)}: saved {out / 'last.pt'} at epoch 1, batch 3; "
                                 "continue with --resume")
    assert checkpoints.load(out / "last.pt")["batches_done"] == 3
    assert signal.getsignal(signal.SIGINT) is before  # the handler is back

def test_a_used_folder_is_refused_unless_resume_or_overwrite(tiny_spec, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    assert train_main(args(tiny_spec, out, "--epochs", "1")) == 0
    capsys.readouterr()
    assert train_main(args(tiny_spec, out, "--epochs", "1")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds an earlier run" in err and "--overwrite" in err
    assert train_main(args(tiny_spec, out, "--resume", "--overwrite")) == 2
    assert "give one" in capsys.readouterr().err
    # --overwrite removes the earlier run's files before the new run writes any: stopped after its first
    # step, the folder holds only the new run's mid-epoch last.pt
    monkeypatch.setattr(faults, "_passes", {})
    monkeypatch.setenv("VSPEC_TEST_KILL_AT", "step:1:TERM")
    assert train_main(args(tiny_spec, out, "--epochs", "1", "--overwrite")) == 128 + signal.SIGTERM
    assert sorted(p.name for p in out.iterdir()) == ["last.pt"]
    assert checkpoints.load(out / "last.pt")["batches_done"] == 1
