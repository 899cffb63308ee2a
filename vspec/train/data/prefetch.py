"""What timm's prefetcher does, for the training loop: the next batches fetched (and on CUDA moved to the device on
a side stream) by a thread of their own while the step runs (`Prefetcher`, `--prefetch`). (The device's
normalisation of uint8 batches, `DeviceNormalise`, is an input path's: vspec/train/data/pipelines.py.)"""

from __future__ import annotations

import queue
import sys
import threading

import torch

__all__ = ["Prefetcher", "ahead"]


def _keep(batch, stream) -> None:
    """The allocator keeps the batch's device memory until `stream` is done with it (memory made on another)."""
    if isinstance(batch, torch.Tensor):
        if batch.device.type == "cuda":
            batch.record_stream(stream)
    elif isinstance(batch, dict):
        for v in batch.values():
            _keep(v, stream)
    elif isinstance(batch, (tuple, list)):
        for v in batch:
            _keep(v, stream)


_END = object()  # the loader's epoch is over


class Prefetcher:
    """A loader's batches fetched `depth` ahead by a thread of their own, so the loop's thread launches the step
    while the next batches come (timm's prefetcher, off the main thread). On CUDA the thread also moves each
    batch to the device (`move`) on a side stream, from the loader's pinned memory, and records an event there:
    the step's stream waits on it (on the device, not the host) and keeps the memory until it is done with it.
    On the CPU the thread only fetches. The batches are the loader's, in its order (a skip set on the loader
    holds); the main process's random streams are not touched (its loader has workers: the thread only reads
    their queue); a loader's error (a worker's) is raised where the loop takes the batch; the wait for a batch
    is one a signal ends (`signals.StopFlag`). The loop may stop taking batches at any one: the thread ends after
    its current read, and the next pass waits for that before it resets the loader."""

    def __init__(self, loader, device: torch.device, move=None, depth: int = 2):
        if depth < 1:
            raise ValueError(f"depth: at least 1 batch ahead, got {depth}")
        self.loader, self.device, self.move, self.depth = loader, device, move, depth
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.index = (device.index if device.index is not None else torch.cuda.current_device()) \
            if self.stream is not None else None
        self.thread: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        if self.thread is not None:  # an earlier pass left before its end: its read ends before the loader resets
            self.thread.join()
        batches = iter(self.loader)  # here: a loader's workers start (and torch's handlers are set) in this thread
        ready: queue.Queue = queue.Queue(self.depth)
        done = threading.Event()
        self.thread = threading.Thread(target=self._fetch, args=(batches, ready, done), daemon=True,
                                       name="vspec-prefetch")
        self.thread.start()
        return self._take(batches, ready, done)

    def _fetch(self, batches, ready: queue.Queue, done: threading.Event) -> None:
        """The thread: each batch read, moved and handed over (with its event), until the end, an error, or the
        loop's leaving (`done`)."""
        if self.stream is not None:
            torch.cuda.set_device(self.index)  # a thread's own current device
        while not done.is_set():
            event = None
            try:
                batch = next(batches)
                if self.stream is not None and self.move is not None:
                    with torch.cuda.stream(self.stream):
                        batch = self.move(batch)
                        event = torch.cuda.Event()
                        event.record(self.stream)
                item = (batch, event, None)
            except StopIteration:
                item = (None, None, _END)
            except BaseException as e:  # noqa: BLE001 - raised where the loop takes its batch
                item = (None, None, e)
            while not done.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if item[2] is not None:
                return

    def _take(self, batches, ready: queue.Queue, done: threading.Event):
        ended = False
        try:
            while True:
                try:  # a wait of bounded slices: a signal delivered to another thread is seen within one
                    batch, event, end = ready.get(timeout=0.5)
                except queue.Empty:
                    continue
                if end is not None:
                    ended = True
                    if end is _END:
                        return
                    raise end
                if event is not None:
                    current = torch.cuda.current_stream(self.device)
                    current.wait_event(event)
                    _keep(batch, current)
                yield batch
        finally:
            done.set()
            if not ended:
                self._leave(batches)

    def _leave(self, batches) -> None:
        """The loop left before the loader's end (a signal, --max-steps, an error): the thread ends after its
        current read. One still reading after a second (a read that may never end) has the loader's workers shut
        down under it (torch's multi-process iterator), as the loop's own would be: the process can exit."""
        self.thread.join(timeout=1.0)
        shutdown = getattr(batches, "_shutdown_workers", None)
        if self.thread.is_alive() and shutdown is not None:
            shutdown()
            if getattr(self.loader, "_iterator", None) is batches:  # persistent workers: afresh on the next pass
                self.loader._iterator = None
            self.thread = None  # it shares nothing with the next pass

def ahead(loader, device: torch.device, depth: int | None, move=None, note: bool = True):
    """The training batches as the loop takes them: fetched `depth` ahead by a `Prefetcher` (None: 2) where the
    loader has workers; else the loader itself (its reads in the main process draw from the main process's random
    streams, in turn with the steps: a thread would interleave them), with a note where a depth was asked.

    Args:
        loader: the training loader.
        device: where the batches go.
        depth: --prefetch: batches fetched ahead (0: none), or None.
        move: a batch's move to the device (`transfer`), or None.
        note: print the note."""
    if not loader.num_workers:
        if depth and note:
            print(f"note: --prefetch {depth}: the main process reads the data (--workers 0), so the batches are "
                  "read in turn with the steps", file=sys.stderr)
        return loader
    depth = 2 if depth is None else depth
    return Prefetcher(loader, device, move, depth) if depth else loader
