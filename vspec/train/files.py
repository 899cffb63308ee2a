"""Atomic writes of a run's files (checkpoints, metrics, summaries, label folders' records): each written to a
temporary file `.NAME.tmp-PID` beside it, flushed to the disk, then renamed over the file, so a crash at any point
leaves the old file or the new one, never a torn one; a failed write is one `SaveError` line."""

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .faults import kill_point

__all__ = ["SaveError", "atomic_copy", "atomic_save", "atomic_write_text"]


class SaveError(OSError):
    """A checkpoint or run file could not be written; the previous version of the file is kept."""


def atomic_save(obj: Any, path: Path) -> None:
    """torch.save to a temporary file in the same folder, fsync, then rename over `path`: a crash at
    any point leaves either the old file or the new one, never a torn one.

    Args:
        obj: what torch.save writes.
        path: the file written."""
    _atomic_write(Path(path), lambda f: torch.save(obj, f))


def atomic_copy(src: Path, path: Path) -> None:
    """`src`'s bytes copied atomically to `path` (a temporary file beside it, then renamed).

    Args:
        src: the file copied.
        path: where the copy goes."""
    with open(src, "rb") as s:
        _atomic_write(Path(path), lambda f: shutil.copyfileobj(s, f))


def atomic_write_text(text: str | bytes, path: Path) -> None:
    """`text` (a str, UTF-8 encoded, or bytes as they are) written atomically to `path`.

    Args:
        text: the contents.
        path: the file written."""
    data = text.encode() if isinstance(text, str) else text
    _atomic_write(Path(path), lambda f: f.write(data))


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
