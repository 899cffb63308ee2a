"""The crash tests' hook (tests/train/test_faults.py): `VSPEC_TEST_KILL_AT=POINT:N[:SIGNAL]` in the environment
kills this process at the N-th pass through a named point of the loop or of an atomic write. Torch-free."""

import os
import signal
from collections.abc import Callable

__all__ = ["kill_hook", "kill_point"]

_passes: dict[str, int] = {}


def kill_hook(point: str) -> Callable[[], None] | None:
    """`kill_point(point)` as a function for a loop to call, or None when VSPEC_TEST_KILL_AT names another point
    (or none): the training step pays nothing for the crash tests.

    Args:
        point: the point's name."""
    hook = os.environ.get("VSPEC_TEST_KILL_AT")
    if not hook or hook.split(":")[0] != point:
        return None
    return lambda: kill_point(point)


def kill_point(point: str) -> None:
    """Crash-test hook (tests/train/test_faults.py): with VSPEC_TEST_KILL_AT=POINT:N[:SIGNAL] in the
    environment, the N-th pass through POINT sends SIGNAL (default KILL) to this process. Points: `step`
    (after an optimizer step), `write` (inside an atomic write: the temporary file is complete, not yet
    renamed), `written` (right after the rename), `fork` (in this process right after it forked one: a loader's
    worker starting, inside torch's iterator).

    Args:
        point: the point's name."""
    hook = os.environ.get("VSPEC_TEST_KILL_AT")
    if not hook or hook.split(":")[0] != point:
        return
    _, n, *sig = hook.split(":")
    _passes[point] = _passes.get(point, 0) + 1
    if _passes[point] == int(n):
        os.kill(os.getpid(), getattr(signal, "SIG" + (sig[0] if sig else "KILL")))


if (os.environ.get("VSPEC_TEST_KILL_AT") or "").split(":")[0] == "fork":  # only when a crash test names it
    os.register_at_fork(after_in_parent=lambda: kill_point("fork"))
