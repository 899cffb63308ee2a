"""vspec.train.data.prefetch.Prefetcher on the CPU (its thread without streams): the loader's batches in its order, a
skip and an epoch left early included, the main process's random streams untouched, a worker's error raised where the
batch is taken, a stop signal ending the wait for a batch; on CUDA's calls (faked) each batch is moved on the side
stream and waited for on the step's; a run with loader workers trains alike with and without it."""

import multiprocessing
import os
import signal
import threading
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from tests.helpers.image_runs import args, assert_same_weights, weights  # noqa: F401 - tiny_spec is a fixture
from vspec.cli.train import main as train_main
from vspec.train.data.loader import build_loaders, set_epoch
from vspec.train.data.prefetch import Prefetcher
from vspec.train.data.registry import DataError
from vspec.train.signals import Stop, StopFlag

CPU = torch.device("cpu")


class Drawn(Dataset):
    """Item i: (a draw from the worker's torch RNG, i): the batches show the order and the workers' streams."""

    def __init__(self, n: int = 40, broken: int | None = None, wait_for=None):
        self.n, self.broken, self.wait_for = n, broken, wait_for

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i == self.broken:
            raise DataError(f"image {i}: does not decode")
        if self.wait_for is not None and i == self.n - 1:  # the last item waits (at most 60 s) for the test
            for _ in range(6000):
                if self.wait_for.exists():
                    break
                time.sleep(0.01)
        return torch.rand(3), i


def loader(workers: int = 2, **kw):
    return build_loaders(Drawn(**kw), Drawn(8), batch_size=4, workers=workers, seed=7)[0]


def epochs(batches, plan):
    """The batches of each (epoch, skip, taken) of `plan` (taken: how many before leaving the epoch; None: all)."""
    out = []
    for epoch, skip, taken in plan:
        set_epoch(batches.loader if isinstance(batches, Prefetcher) else batches, epoch, skip=skip * 4)
        got = []
        for batch in batches:
            got.append(batch)
            if len(got) == taken:
                break
        out.append(got)
    return out


def same(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for p, q in zip(a, b) for x, y in zip(p, q))


def test_the_batches_are_the_loaders_in_its_order():
    """Two loaders alike, one read plainly, one through the prefetcher (2 workers, persistent): the same batches
    epoch by epoch and after a skip (a mid-epoch resume), and the main process's random state untouched. After an
    epoch left early the order is still the loader's (the thread's read ahead ends before the loader resets); the
    persistent workers' draws then go on from how far they had read ahead, in the plain loader too (an epoch is
    left early when the run ends: --max-steps, a signal)."""
    plan = [(0, 0, None), (1, 3, None), (2, 0, None), (3, 0, 2), (4, 1, None), (5, 0, 1), (6, 0, None)]
    plain = epochs(loader(), plan)
    rng = torch.get_rng_state()
    fetched = epochs(Prefetcher(loader(), CPU, depth=3), plan)
    assert torch.equal(torch.get_rng_state(), rng)
    assert [len(e) for e in fetched] == [10, 7, 10, 2, 9, 1, 10]
    assert all(same(a, b) for a, b in zip(plain[:4], fetched[:4]))
    assert all(torch.equal(p[1], q[1]) for a, b in zip(plain, fetched) for p, q in zip(a, b))
    assert [int(i) for b in fetched[1] for i in b[1]] != sorted(int(i) for b in fetched[1] for i in b[1])  # shuffled


def test_a_workers_error_is_raised_where_the_batch_is_taken():
    """A worker's DataError (torch wraps it in its traceback) comes out of the prefetcher as the same one line,
    after the batches before it."""
    taken = []
    with pytest.raises(DataError) as caught:
        for batch in Prefetcher(_ordered(broken=9), CPU):
            taken.append(batch)
    assert str(caught.value) == "image 9: does not decode"
    assert [b[1].tolist() for b in taken] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def _ordered(workers: int = 2, persistent_workers: bool = False, **kw):
    """A loader in index order: which batch fails or waits is known."""
    return DataLoader(Drawn(16, **kw), batch_size=4, num_workers=workers, persistent_workers=persistent_workers)


def test_a_stop_signal_ends_the_wait_for_a_batch(tmp_path):
    """The loop waits for a batch that a worker is still reading when SIGTERM comes: the wait ends with `Stop` (the
    loop saves at that boundary), not with the batch, and the workers are shut down under the read."""
    release = tmp_path / "release"
    prefetcher = Prefetcher(_ordered(wait_for=release), CPU)
    taken = []
    with StopFlag() as flag:
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
        with pytest.raises(Stop):
            for batch in flag.batches(prefetcher):
                taken.append(batch)
                if len(taken) == 3:
                    timer.start()  # the 4th batch holds the item that waits
        timer.join()
    release.touch()
    assert flag.signum == signal.SIGTERM and len(taken) == 3 and prefetcher.thread is None


def test_leaving_during_a_read_that_never_ends_shuts_the_workers_down(tmp_path):
    """The loop leaves (a signal, --max-steps) while the thread waits on a worker's read that may never end: the
    loader's workers are shut down under it (as the loop's own iterator would be when dropped), so the process can
    exit, and the thread ends."""
    release = tmp_path / "release"
    before = set(multiprocessing.active_children())
    prefetcher = Prefetcher(_ordered(wait_for=release, workers=1, persistent_workers=True), CPU)
    try:
        for k, _ in enumerate(prefetcher):
            workers = set(multiprocessing.active_children()) - before
            if k == 2:  # the thread is reading the 4th batch, whose last item waits
                break
        assert prefetcher.thread is None and workers and not any(w.is_alive() for w in workers)
    finally:
        release.touch()


class Fake:
    """torch.cuda's streams and events as calls recorded in order: (what, which stream, thread name)."""

    def __init__(self):
        self.calls, self.current = [], threading.local()
        outer = self

        class Stream:
            def __init__(self, device=None, name="side"):
                self.name = name

            def wait_event(self, event):
                outer.calls.append(("wait", self.name, event.id, threading.current_thread().name))

        class Event:
            count = 0

            def __init__(self):
                Event.count += 1
                self.id = Event.count

            def record(self, stream):
                outer.calls.append(("record", stream.name, self.id, threading.current_thread().name))

        class Using:
            def __init__(self, stream):
                self.stream = stream

            def __enter__(self):
                outer.current.stream = self.stream

            def __exit__(self, *exc):
                outer.current.stream = None

        self.Stream, self.Event, self.stream = Stream, Event, Using
        self.main = Stream(name="step")

    def current_stream(self, device=None):
        return self.main


def test_on_cuda_each_batch_is_moved_on_the_side_stream_and_waited_for_on_the_steps(monkeypatch):
    """CUDA's calls faked: the thread moves each batch under the side stream and records an event there after the
    move; the step's stream waits on that event before the batch is handed over, in the loader's order."""
    fake = Fake()
    for name in ("Stream", "Event", "stream", "current_stream"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    moved = []

    def move(batch):
        moved.append((int(batch[1][0]), getattr(fake.current, "stream", None).name, threading.current_thread().name))
        fake.calls.append(("move", int(batch[1][0])))
        return batch

    taken = []
    for batch in Prefetcher(_ordered(), torch.device("cuda", 0), move):
        fake.calls.append(("take", int(batch[1][0])))
        taken.append(int(batch[1][0]))
    assert taken == [0, 4, 8, 12]
    assert moved == [(i, "side", "vspec-prefetch") for i in taken]
    for k, first in enumerate(taken):  # per batch: moved, recorded on the side stream, waited on by the step's
        move_at = fake.calls.index(("move", first))
        record = fake.calls[move_at + 1]
        assert record[:2] == ("record", "side") and record[3] == "vspec-prefetch"
        wait = fake.calls.index(("wait", "step", record[2], threading.current_thread().name))
        assert move_at < wait < fake.calls.index(("take", first))


def test_a_run_with_loader_workers_trains_alike_with_and_without_the_prefetcher(tiny_spec, tmp_path):
    """`vspec train` with 2 loader workers (the prefetcher on by default) and with --prefetch 0: the same weights
    after two epochs, and the same records."""
    for name, extra in (("on", ()), ("off", ("--prefetch", "0"))):
        assert train_main(args(tiny_spec, tmp_path / name, "--epochs", "2", "--workers", "2", *extra)) == 0
    assert_same_weights(weights(tmp_path / "on" / "last.pt"), weights(tmp_path / "off" / "last.pt"))
    assert (tmp_path / "on" / "metrics.jsonl").read_text().count("val_top1") == 2


def test_without_workers_the_loop_reads_in_turn_and_says_so(tiny_spec, tmp_path, capsys):
    """--prefetch N without loader workers: the main process reads (its augmentations draw from its random
    streams between the steps), so no thread; one note says so."""
    assert train_main(args(tiny_spec, tmp_path / "run", "--epochs", "1", "--prefetch", "2")) == 0
    assert "note: --prefetch 2: the main process reads the data (--workers 0)" in capsys.readouterr().err


def test_a_depth_below_one_is_refused():
    with pytest.raises(ValueError, match="depth: at least 1"):
        Prefetcher([], CPU, depth=0)
