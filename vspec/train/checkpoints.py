"""Training checkpoints: atomic writes, RNG states that survive `weights_only=True` loading, the run
folder's own files, and the crash-test hook."""

import errno
import os
import random
import re
import shutil
import signal
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

FORMAT = "vspec-train-1"
# what a run writes into its folder (OUT/tb holds TensorBoard's logs); a fresh run refuses a folder holding
# one of the first four unless --overwrite
RUN_FILES = ("last.pt", "best.pt", "metrics.jsonl", "summary.json", "curves.png")
_TEMP = re.compile(r"\.(last\.pt|best\.pt|metrics\.jsonl|summary\.json)\.tmp-(\d+)")


class SaveError(OSError):
    """A checkpoint or run file could not be written; the previous version of the file is kept."""


def atomic_save(obj: Any, path: Path) -> None:
    """torch.save to a temporary file in the same folder, fsync, then rename over `path`: a crash at
    any point leaves either the old file or the new one, never a torn one."""
    _atomic_write(Path(path), lambda f: torch.save(obj, f))


def atomic_copy(src: Path, path: Path) -> None:
    with open(src, "rb") as s:
        _atomic_write(Path(path), lambda f: shutil.copyfileobj(s, f))


def atomic_write_text(text: str, path: Path) -> None:
    _atomic_write(Path(path), lambda f: f.write(text.encode()))


def _atomic_write(path: Path, write: Callable) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        kill_point("write")
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:  # torch.save reports a failed write as RuntimeError("unexpected pos")
        kept = f"; the previous {path.name} is kept" if path.exists() else ""
        raise SaveError(f"cannot write {path}: {_reason(e)}{kept}") from e
    finally:
        if tmp.exists():
            tmp.unlink()
    kill_point("written")
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _reason(e: BaseException) -> str:
    seen = e
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return "no space left on device"
        seen = seen.__cause__ or seen.__context__
    return (str(e).splitlines() or [type(e).__name__])[0]


def clean_stale_temps(folder: Path) -> list[Path]:
    """Remove the temporary files that killed saves of a run left in `folder` (only our own names, and
    only those of processes no longer alive); returns them."""
    removed = []
    for p in Path(folder).glob(".*.tmp-*"):
        m = _TEMP.fullmatch(p.name)
        if m and not _alive(int(m.group(2))):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


_passes: dict[str, int] = {}


def kill_point(point: str) -> None:
    """Crash-test hook (tests/test_train_faults.py): with VSPEC_TEST_KILL_AT=POINT:N[:SIGNAL] in the
    environment, the N-th pass through POINT sends SIGNAL (default KILL) to this process. Points: `step`
    (after an optimizer step), `write` (inside an atomic write: the temporary file is complete, not yet
    renamed), `written` (right after the rename)."""
    hook = os.environ.get("VSPEC_TEST_KILL_AT")
    if not hook or hook.split(":")[0] != point:
        return
    _, n, *sig = hook.split(":")
    _passes[point] = _passes.get(point, 0) + 1
    if _passes[point] == int(n):
        os.kill(os.getpid(), getattr(signal, "SIG" + (sig[0] if sig else "KILL")))


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states as tensors / plain values (loadable with weights_only)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def load(path: Path) -> dict[str, Any]:
    """A training checkpoint, upgraded to the current spec format (see vspec.checkpoint)."""
    from ..checkpoint import migrate_checkpoint

    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise ValueError(f"{path}: not a vspec training checkpoint")
    return migrate_checkpoint(ckpt) if "spec" in ckpt else ckpt
