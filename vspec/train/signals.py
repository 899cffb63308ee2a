"""Stop signals in a training run: SIGTERM / SIGINT save at a step boundary (`StopFlag`, the loop's batches
watched by it: `Batches`), the loader's workers leave them to the main process for a grace period (`worker_init`),
a second one ends the run at once."""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["Batches", "Stop", "StopFlag", "WORKER_GRACE", "worker_init"]

WORKER_GRACE = 5.0  # seconds a loader's worker outlives a stop signal: the main process acts on its own first


def worker_init(worker_id: int) -> None:
    """The `worker_init_fn` of a run's data loaders: the first SIGTERM / SIGINT a worker gets from outside (one sent
    to the whole process group: `kill -TERM -PGID`, scancel, systemd's stop, Ctrl-C) is the main process's to act on
    (`StopFlag`): the worker outlives it by `WORKER_GRACE` seconds, so that it does not die before the main process
    has taken the signal (torch's SIGCHLD handler would raise wherever the loop is, a save included), then ends as
    the signal would; a second signal, or one its own parent sends (the loader ending its workers), ends it at once.
    The signals are taken by a thread of their own (`sigwaitinfo` names the sender); where the platform has no
    `sigwaitinfo`, the first signal starts the grace whoever sent it.

    Args:
        worker_id: the worker's index (DataLoader passes it)."""
    signals = {signal.SIGTERM, signal.SIGINT}
    if hasattr(signal, "sigwaitinfo"):
        for sig in signals:
            signal.signal(sig, signal.SIG_DFL)  # as the signal would, once this thread lets it through
        signal.pthread_sigmask(signal.SIG_BLOCK, signals)  # threads started later inherit the mask
        threading.Thread(target=_watch, args=(signals,), daemon=True).start()
        return

    def handle(signum, frame):
        if seen:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        seen.append(signum)
        timer = threading.Timer(WORKER_GRACE, os.kill, (os.getpid(), signum))  # the second signal, later
        timer.daemon = True
        timer.start()

    seen: list[int] = []
    for sig in signals:
        signal.signal(sig, handle)


def _watch(signals: set) -> None:
    """A worker's signal thread: the first signal from outside waits `WORKER_GRACE` (or the next signal); then the
    signal is let through to this thread, ending the process as it would have."""
    info = signal.sigwaitinfo(signals)
    if info.si_pid != os.getppid():
        later = signal.sigtimedwait(signals, WORKER_GRACE)
        info = later or info
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {info.si_signo})
    os.kill(os.getpid(), info.si_signo)


def _nothing(signum, frame) -> None:
    """A signal handler that does nothing."""


class Stop(BaseException):
    """A stop signal ended the loop's wait for its next batch (`StopFlag.batches`): the loop is at a step
    boundary and saves there. A BaseException: no `except Exception` of a reader on the way swallows it."""


class StopFlag:
    """While active, the first SIGTERM / SIGINT sets a flag: the loop checkpoints at its next step boundary and
    raises `Interrupted`. Where the loop waits for its next batch (a read that may never end: a stalled file
    system, a dead `pipe:` source) it stops the wait at once when `prompt` (one process; under DDP every rank
    finishes its step, or the others would wait for it). A second signal ends the process at once, unsaved, as
    the signal would. The previous handlers come back on exit; after a signal SIGCHLD's stays one that does
    nothing (the run is ending)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, prompt: bool = True):
        self.signum: int | None = None
        self.previous = {}
        self.prompt, self.waiting = prompt, False

    def __enter__(self):
        for sig in self.SIGNALS:
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame):
        if self.signum is not None:
            os.write(2, f"signal {signum} again: stopped at once, without saving\n".encode())
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signum = signum
        # a loader's worker the signal ended (one starting, before its handlers) shows where the loop reads its
        # batch (`batches`), not in torch's SIGCHLD handler wherever the loop is, a save included; a handler that
        # does nothing, not SIG_DFL: a SIGCHLD already pending would be reported "ignored due to race condition"
        signal.signal(signal.SIGCHLD, _nothing)
        if self.waiting:
            raise Stop

    def batches(self, loader) -> Batches:
        """`loader` watched by this flag (`Batches`).

        Args:
            loader: the data loader."""
        return Batches(self, loader)


class Batches:
    """A loader's batches under a StopFlag, raising `Stop` before a batch is read once a signal has arrived, from
    the wait for one (`prompt`), and for the loader's RuntimeError after a signal (a worker it ended). The loader's
    iterator is made (its workers started) before any wait: a signal there only sets the flag. (Where the main
    process reads the data, its draws leave the run's random streams as they were: data.loader.sample_draws.)"""

    def __init__(self, stop: StopFlag, loader):
        self.stop, self.loader = stop, loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        stop = self.stop
        if stop.signum is not None:
            raise Stop
        batches = iter(self.loader)  # not in the wait: its workers start whole
        while True:
            try:
                stop.waiting = stop.prompt
                if stop.signum is not None:
                    raise Stop
                batch = next(batches)
            except StopIteration:
                return
            except RuntimeError:
                if stop.signum is None:
                    raise
                raise Stop from None
            finally:
                stop.waiting = False
            yield batch
