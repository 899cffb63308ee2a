"""A one-line progress bar (loss, lr, images/s or samples/s: `unit`, ETA) for rank 0. On a terminal it is redrawn in
place (at most `redraw` times a second); when the output is a file or a pipe (CI logs, redirected runs) a line is
printed every `interval` seconds and one at the end, never a line per update."""

import sys
import time


class Progress:
    def __init__(self, total: int, desc: str, enabled: bool = True, interval: float = 30.0, stream=None,
                 unit: str = "img", redraw: float = 10.0, clock=time.perf_counter):
        if not interval > 0:
            raise ValueError(f"interval: must be > 0 seconds, got {interval}")
        self.total, self.desc, self.enabled, self.unit, self.clock = total, desc, enabled, unit, clock
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval = 1.0 / redraw if self.tty else interval
        self.start = self.clock()
        self.last = self.start  # when the last line was written (the first after `interval`)
        self.first = None
        self.line = ""

    def update(self, done: int, **values: float) -> None:
        if not self.enabled:
            return
        if self.first is None:
            self.first = done - 1  # a resumed epoch starts part-way
        now = self.clock()
        if now - self.last < self.interval and done != self.total:
            return
        self.last = now
        elapsed = now - self.start
        rate = (done - self.first) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else 0.0
        width = 20
        filled = int(width * done / max(self.total, 1))
        parts = [f"{k} {v:.3g}" if k != "ips" else f"{v:.1f} {self.unit}/s" for k, v in values.items()]
        self.line = (f"{self.desc} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
                     + "  ".join(parts) + f"  ETA {eta:.0f}s")
        if self.tty:
            self.stream.write("\r" + self.line)
        else:
            self.stream.write(self.line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty and self.line:
            self.stream.write("\n")
            self.stream.flush()
