"""The progress bar (loss, lr, images/s or samples/s: `unit`, ETA) for rank 0, drawn by tqdm. On a terminal tqdm
redraws it in place (at most `redraw` times a second); when the output is a file or a pipe (CI logs, redirected runs)
the same line (`tqdm.format_meter`) is printed every `interval` seconds and once at the end, never a line per update
and never a carriage return."""

import sys
import time

from tqdm import tqdm

__all__ = ["ASCII", "FORMAT", "Progress"]

# `epoch 2/90 [#####...............] 250/1000, loss 6.91  lr 0.0005  812.3 img/s  ETA 00:55`
FORMAT = "{desc} [{bar:20}] {n_fmt}/{total_fmt}{postfix}  ETA {remaining}"
ASCII = ".#"  # the bar's empty and full cells: plain ASCII in any log


class Progress:
    """One epoch's progress line (the module's docstring says how it is drawn).

    Args:
        total: the batches of the epoch.
        desc: what the line begins with ("epoch 2/90").
        enabled: False draws nothing (ranks other than 0).
        interval: seconds between the lines written off a terminal.
        stream: where it is drawn (default: sys.stderr).
        unit: what the rate counts ("img", "samples").
        redraw: most redraws a second on a terminal.
        clock: the time source (tests give their own)."""
    def __init__(self, total: int, desc: str, enabled: bool = True, interval: float = 30.0, stream=None,
                 unit: str = "img", redraw: float = 10.0, clock=time.perf_counter):
        if not interval > 0:
            raise ValueError(f"interval: must be > 0 seconds, got {interval}")
        self.total, self.desc, self.enabled, self.unit, self.clock = total, desc, enabled, unit, clock
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval, self.redraw = interval, redraw
        self.start = self.last = self.clock()  # off a terminal: when the last line was written
        self.first = None  # the count before the first update: a resumed epoch starts part-way
        self.bar: tqdm | None = None  # on a terminal
        self.line = ""

    def update(self, done: int, **values: float) -> None:
        """Record that `done` batches are done, with the values shown after the bar.

        Args:
            done: the batches done so far in the epoch.
            **values: shown as `name value` (`ips`: as the rate, `<v> <unit>/s`)."""
        if not self.enabled:
            return
        if self.first is None:
            self.first = done - 1
        postfix = "  ".join(f"{v:.1f} {self.unit}/s" if k == "ips" else f"{k} {v:.3g}" for k, v in values.items())
        if self.tty:
            if self.bar is None:  # no monitor thread (maxinterval=0): a redraw happens in update, nowhere else
                self.bar = tqdm(total=self.total, initial=self.first, desc=self.desc, file=self.stream, leave=True,
                                bar_format=FORMAT, ascii=ASCII, mininterval=1.0 / self.redraw, maxinterval=0,
                                miniters=1)
            self.bar.set_postfix_str(postfix, refresh=False)
            self.bar.update(done - self.bar.n)
            return
        now = self.clock()
        if now - self.last < self.interval and done != self.total:
            return
        self.last = now
        self.line = tqdm.format_meter(done, self.total, now - self.start, prefix=self.desc, postfix=postfix,
                                      bar_format=FORMAT, ascii=ASCII, initial=self.first)
        self.stream.write(self.line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """On a terminal: the last state drawn and the line ended."""
        if self.bar is not None:
            self.bar.close()
