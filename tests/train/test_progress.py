"""The progress line: on a file or a pipe, a line per time interval and one at the end, never one per update; on a
terminal, one line redrawn in place. A fake clock stands in for time."""

import io

import pytest

from vspec.train.progress import Progress


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class Tty(io.StringIO):
    def isatty(self):
        return True


def run(stream, steps, dt, **kw):
    clock = Clock()
    bar = Progress(steps, "epoch 1/1", stream=stream, clock=clock, **kw)
    for i in range(1, steps + 1):
        clock.t += dt
        bar.update(i, loss=1.0, ips=100.0)
    bar.close()
    return stream.getvalue()


def test_not_a_terminal_prints_at_the_interval_and_at_the_end():
    out = run(io.StringIO(), steps=1000, dt=0.125, interval=30.0)  # 125 s of updates
    lines = out.splitlines()
    assert [line.split("] ")[1].split(",")[0] for line in lines] == [
        "240/1000", "480/1000", "720/1000", "960/1000", "1000/1000"]
    assert "\r" not in out and all(line.startswith("epoch 1/1 [") for line in lines)
    assert lines[0] == "epoch 1/1 [####................] 240/1000, loss 1  100.0 img/s  ETA 01:35"  # 760 at 8 per s
    assert lines[-1].endswith("] 1000/1000, loss 1  100.0 img/s  ETA 00:00")


def test_a_resumed_epoch_counts_its_rate_from_where_it_started():
    clock, out = Clock(), io.StringIO()
    bar = Progress(100, "epoch 2/3", stream=out, clock=clock, interval=10.0)
    for i in range(51, 101):  # 50 batches skipped: 2 batches a second from here
        clock.t += 0.5
        bar.update(i, loss=2.0)
    assert out.getvalue().splitlines()[0] == "epoch 2/3 [##############......] 70/100, loss 2  ETA 00:15"


def test_fast_epochs_print_only_their_end():
    assert len(run(io.StringIO(), steps=5000, dt=0.001, interval=30.0).splitlines()) == 1


def test_a_terminal_redraws_one_line_in_place_at_most_redraw_times_a_second():
    out = run(Tty(), steps=1024, dt=1 / 64, redraw=1e-6)  # tqdm's clock: no redraw within 10**6 s
    assert out.endswith("\n") and out.count("\n") == 1
    assert out.count("\r") == 2  # the first draw and the last (at close), not 1024
    assert out.split("\r")[-1] == "epoch 1/1 [####################] 1024/1024, loss 1  100.0 img/s  ETA 00:00\n"


def test_a_disabled_bar_writes_nothing():
    assert run(io.StringIO(), steps=10, dt=60, enabled=False) == run(Tty(), steps=10, dt=60, enabled=False) == ""


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval: must be > 0"):
        Progress(10, "x", interval=0)
