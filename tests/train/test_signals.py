"""Stop signals: SIGTERM to the whole process group with loader workers (`kill -TERM -PGID`, scancel, systemd's stop)
saves the epoch's progress for folder and shard data, a worker the signal ended included (a class of draws, its
figures printed); a signal while the loop waits on a read that never ends stops it at that step boundary; a second
signal ends the process at once."""

import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.helpers import ROOT
from tests.helpers.image_runs import args, assert_same_weights, env, weights  # noqa: F401 - tiny_spec is a fixture
from tests.helpers.shard_runs import image_folder, packed
from vspec.cli.train import config_from_args, train_parser
from vspec.train import checkpoints, engine
from vspec.train.data import sources

TERM = int(signal.SIGTERM)


def run_args(spec, data, out, *extra):
    """An epoch of 6 steps (48 images in batches of 8) over 2 workers."""
    name = "shards" if (data / "manifest.json").is_file() else "imagefolder"
    return [str(ROOT / "tools/train.py"), str(spec), "--data", name, "--data-dir", str(data), "--out", str(out),
            "--batch-size", "8", "--device", "cpu", "--seed", "3", "--epochs", "1", "--workers", "2", *extra]


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (the loader's workers)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


class Draw(NamedTuple):
    data: str  # imagefolder or shards
    signum: int
    step: int  # the run stops (SIGSTOP, the crash-test hook) after this step, and the signal comes
    workers: int
    kill_workers: bool  # the workers ended by SIGKILL beside it (as one still starting, before its handlers, is)


def signal_draws(n: int, seed: int = 0) -> list[Draw]:
    """The process-group signals' class: the issue's two (SIGTERM after step 2 with 2 workers, folder and shard
    data), then `n - 2` drawn from a seeded RNG."""
    rng = random.Random(seed)
    draws = [Draw("imagefolder", TERM, 2, 2, False), Draw("shards", TERM, 2, 2, False)]
    while len(draws) < n:
        draws.append(Draw(rng.choice(["imagefolder", "shards"]), rng.choice([TERM, int(signal.SIGINT)]),
                          rng.randint(1, 5), rng.choice([1, 2]), rng.random() < 0.5))
    return draws


def group_signal(draw: Draw, spec, data, out, log: Path) -> tuple[int | None, str]:
    """The run stopped after `draw.step`, its workers killed where the draw says, `draw.signum` to its whole
    process group, then SIGCONT: (exit code, or None if it still ran after 120 s; stderr)."""
    err = log.open("w+")
    proc = subprocess.Popen([sys.executable, *run_args(spec, data, out, "--workers", str(draw.workers))],
                            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                            env=dict(env(), VSPEC_TEST_KILL_AT=f"step:{draw.step}:STOP"))
    try:
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        if draw.kill_workers:
            workers = children(proc.pid)
            assert len(workers) == draw.workers
            for pid in workers:
                os.kill(pid, signal.SIGKILL)
        os.killpg(proc.pid, draw.signum)
        os.killpg(proc.pid, signal.SIGCONT)
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err.seek(0)
    return code, err.read()


def test_process_group_signals_save_the_epochs_progress_and_resume(tmp_path, tiny_spec, capsys):
    """`kill -TERM -PGID` (scancel, systemd's stop; Ctrl-C's SIGINT) with loader workers: every draw exits
    128 + N with last.pt saved at its step boundary and no traceback (the workers died first, and the main process
    raised torch's RuntimeError); --resume continues the folder's and the shards' runs to the epoch's end."""
    data = {"imagefolder": image_folder(tmp_path / "images"), "shards": packed(tmp_path)}
    results = []
    for i, draw in enumerate(signal_draws(4)):
        out = tmp_path / f"run{i}"
        code, err = group_signal(draw, tiny_spec, data[draw.data], out, tmp_path / f"err{i}.txt")
        saved = checkpoints.load(out / "last.pt") if (out / "last.pt").is_file() else {}
        line = f"signal {draw.signum}: saved {out / 'last.pt'} at epoch 1, batch {draw.step}; continue with --resume"
        good = code == 128 + draw.signum and "Traceback" not in err and err.splitlines()[-1:] == [line] and (
            saved.get("epoch"), saved.get("batches_done"), saved.get("global_step")) == (0, draw.step, draw.step)
        results.append((draw, code, err, good))
    with capsys.disabled():
        print(f"\nprocess-group signals: tried {len(results)} / saved, exit 128 + N {sum(r[3] for r in results)} / "
              f"tracebacks {sum('Traceback' in r[2] for r in results)} / hangs {sum(r[1] is None for r in results)}")
    assert [(draw, code, err[-2000:]) for draw, code, err, good in results if not good] == []
    for i in (0, 1):
        done = subprocess.run([sys.executable, *run_args(tiny_spec, data[results[i][0].data], tmp_path / f"run{i}",
                                                         "--resume")], env=env(), capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert checkpoints.load(tmp_path / f"run{i}" / "last.pt")["global_step"] == 6


def test_a_signal_as_validation_starts_its_shard_workers_is_the_one_line(tmp_path, tiny_spec):
    """SIGTERM right after validation's shard loader forks its first worker (`--prefetch 2`; the crash-test point
    `fork`: the epoch's 2 training workers, then validation's, inside torch's iterator): the trained epoch saved, exit
    143, and stderr holds the documented line and nothing else (beside the notes and the progress): the loader's
    iterator starts outside the wait a signal ends, so no `Stop` is raised inside it (once an "Exception ignored"
    traceback, or a half-built iterator's `_workers_status` error)."""
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, *run_args(tiny_spec, packed(tmp_path), out, "--prefetch", "2")],
                          env=dict(env(), VSPEC_TEST_KILL_AT="fork:3:TERM"), capture_output=True, text=True,
                          timeout=300)
    line = f"signal {TERM}: saved {out / 'last.pt'} at epoch 1, batch 6; continue with --resume"
    assert done.returncode == 128 + TERM, done.stderr[-2000:]
    said = [s for s in done.stderr.splitlines() if not s.startswith(("note: ", "precision: ", "epoch 1/1 "))]
    assert said == [line], done.stderr
    saved = checkpoints.load(out / "last.pt")
    assert (saved["epoch"], saved["batches_done"], saved["metrics"]) == (0, 6, [])


def test_the_workers_leave_the_first_stop_signal_to_the_main_process():
    """`worker_init` in a process of its own: the first SIGTERM goes by, the second ends it as SIGTERM does."""
    code = ("import os, signal, time; from vspec.train.signals import worker_init; worker_init(0); "
            "os.kill(os.getpid(), signal.SIGTERM); print('alive', flush=True); os.kill(os.getpid(), signal.SIGTERM); "
            "time.sleep(60)")
    done = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (-signal.SIGTERM, "alive\n")


def test_a_worker_ends_by_itself_after_its_grace_and_never_keeps_its_parent_at_exit():
    """One SIGTERM alone ends a worker as SIGTERM does after WORKER_GRACE; a process that leaves a loader's
    persistent worker alive at its exit (multiprocessing terminates it once, then joins it) ends: it hung."""
    code = ("import os, signal, time; from vspec.train import signals; signals.WORKER_GRACE = 0.2; "
            "signals.worker_init(0); os.kill(os.getpid(), signal.SIGTERM); print('alive', flush=True); time.sleep(60)")
    done = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (-signal.SIGTERM, "alive\n")
    code = ("from torch.utils.data import DataLoader; from vspec.train import signals; "
            "loader = DataLoader(list(range(8)), batch_size=2, num_workers=1, persistent_workers=True, "
            "worker_init_fn=signals.worker_init); batches = iter(loader); print(next(batches).tolist(), flush=True)")
    done = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "[0, 1]\n"), done.stderr[-2000:]


def test_a_second_signal_ends_the_run_at_once():
    """The first signal waits for the step boundary; a second (the step hangs, or the user insists) ends the
    process as the signal would, saying it saved nothing."""
    code = ("import os, signal, time; from vspec.train.signals import StopFlag\n"
            "with StopFlag():\n os.kill(os.getpid(), signal.SIGTERM); print('flagged', flush=True)\n"
            " os.kill(os.getpid(), signal.SIGTERM); time.sleep(60)")
    done = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (-signal.SIGTERM, "flagged\n")
    assert done.stderr == f"signal {TERM} again: stopped at once, without saving\n"


def hang_at(monkeypatch, call: int, signum=signal.SIGTERM):
    """The `call`-th image read blocks on a pipe nobody writes (as a FIFO image, an NFS stall or a dead `pipe:`
    source does) and `signum` arrives while it waits; the read ends after 20 s if the signal did not end it."""
    calls, get = [0], sources.SyntheticImages.__getitem__

    def blocking(self, i):
        calls[0] += 1
        if calls[0] == call:
            r, w = os.pipe()
            unblock = threading.Timer(20, os.write, (w, b"x"))
            threading.Timer(0.2, os.kill, (os.getpid(), signum)).start()
            unblock.start()
            try:
                os.read(r, 1)
            finally:
                unblock.cancel()
                os.close(r)
                os.close(w)
        return get(self, i)

    monkeypatch.setattr(sources.SyntheticImages, "__getitem__", blocking)


def test_a_signal_during_a_read_that_never_ends_stops_at_the_step_boundary(tiny_spec, tmp_path, monkeypatch):
    """The run waits in its 3rd batch's read (batches of 16, one process, the main process reading) when SIGTERM
    comes: it saves the 2 steps done at once, and the resumed run ends where the uninterrupted one does (the RNG
    states of the boundary, not those the abandoned read's random crops left)."""
    ref, out = tmp_path / "ref", tmp_path / "cut"

    def run(folder, *extra):
        flags = ("--epochs", "1", "--random-resized-crop", *extra)
        return engine.run(config_from_args(train_parser().parse_args(args(tiny_spec, folder, *flags))))

    run(ref)
    hang_at(monkeypatch, 2 * 16 + 5)
    with pytest.raises(engine.Interrupted) as caught:
        run(out)
    assert caught.value.signum == TERM
    assert checkpoints.load(out / "last.pt")["batches_done"] == 2
    monkeypatch.undo()
    run(out, "--resume")
    assert_same_weights(weights(ref / "last.pt"), weights(out / "last.pt"))


def test_a_signal_during_evaluation_keeps_the_trained_epoch(tiny_spec, tmp_path, monkeypatch):
    """Stopped while reading a validation image: last.pt holds the whole trained epoch, and --resume evaluates
    it."""
    ref, out = tmp_path / "ref", tmp_path / "cut"
    parse = train_parser().parse_args
    engine.run(config_from_args(parse(args(tiny_spec, ref, "--epochs", "1"))))
    hang_at(monkeypatch, 64 + 3)  # 64 training images, then the validation split
    with pytest.raises(engine.Interrupted):
        engine.run(config_from_args(parse(args(tiny_spec, out, "--epochs", "1"))))
    last = checkpoints.load(out / "last.pt")
    assert (last["epoch"], last["batches_done"], last["metrics"]) == (0, 4, [])
    monkeypatch.undo()
    engine.run(config_from_args(parse(args(tiny_spec, out, "--epochs", "1", "--resume"))))
    got, want = (checkpoints.load(o / "last.pt")["metrics"] for o in (out, ref))
    assert [{k: m[k] for k in ("train_loss", "val_loss", "val_top1")} for m in got] == \
        [{k: m[k] for k in ("train_loss", "val_loss", "val_top1")} for m in want]
    assert_same_weights(weights(ref / "last.pt"), weights(out / "last.pt"))


def test_a_loaders_error_after_a_signal_is_a_stop():
    """Where the wait is not cut (under DDP) a worker the signal ended shows as the loader's RuntimeError when the
    next batch is read: after a signal that is `Stop` (the loop saves at its boundary), before one the error."""
    from vspec.train.signals import Stop, StopFlag

    def loader(flag, signalled):
        yield "batch 1"
        flag.signum = TERM if signalled else None  # as the handler sets it, while the worker dies
        raise RuntimeError("DataLoader worker (pid 1) is killed by signal: Terminated.")

    for signalled, error in ((True, Stop), (False, RuntimeError)):
        flag = StopFlag(prompt=False)
        batches = iter(flag.batches(loader(flag, signalled)))
        assert next(batches) == "batch 1"
        with pytest.raises(error):
            next(batches)
