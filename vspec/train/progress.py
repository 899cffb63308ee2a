"""A one-line progress bar (loss, lr, images/s or samples/s: `unit`, ETA) for rank 0: redrawn in place on a terminal,
printed every `every` steps (default: about ten times an epoch) when the output is a file."""

import sys
import time


class Progress:
    def __init__(self, total: int, desc: str, enabled: bool = True, every: int = 0, stream=None, unit: str = "img"):
        self.total, self.desc, self.enabled, self.unit = total, desc, enabled, unit
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = every or max(1, total // 10)
        self.start = time.perf_counter()
        self.first = None
        self.line = ""

    def update(self, done: int, **values: float) -> None:
        if not self.enabled:
            return
        if self.first is None:
            self.first = done - 1  # a resumed epoch starts part-way
        if not self.tty and done % self.every and done != self.total:
            return
        elapsed = time.perf_counter() - self.start
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
