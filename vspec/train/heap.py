"""The C allocator during a CPU run: freed activations kept for the next step.

glibc's malloc hands every block from 32 MiB up (its mmap threshold's ceiling) straight back to the kernel when it
is freed, and maps a fresh one at the next request, whose pages the first op to write them faults in one by one.
A training step frees and requests the same large activations every time (Swin-T's stage-1 MLP at batch 16:
38.5 MB each), so with the default every step pays those faults again. `kept_heap` raises the mmap and trim
thresholds for the run so that such blocks come from the heap and are reused: nothing a step computes changes,
only where its memory comes from (peak memory is what the step needs, held until the run ends). Measured in
`python -m benchmarks.heap`; docs/speed.md, "The allocator". Linux with glibc only, and only where the fast paths
run (`VSPEC_FAST_PATHS=0` leaves the allocator as it is)."""

import contextlib
import ctypes
import functools
import sys
from collections.abc import Iterator

import torch

from ..ops import fast

__all__ = ["kept_heap", "set_heap"]
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
KEPT = 1 << 30  # blocks below 1 GiB from the heap
DEFAULT = 32 << 20  # the mmap threshold's ceiling, where glibc's dynamic threshold settles; trim at twice it


@functools.cache
def _glibc():
    """The process's C library where it is glibc (its mallopt and malloc_trim), else None (another C library or
    platform). Looked up once."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc's own symbol: musl and others lack it
        return libc
    except (OSError, AttributeError):
        return None


def set_heap(kept: bool) -> bool:
    """Blocks below 1 GiB from glibc's heap and kept there when freed (`kept`), or glibc's steady state (blocks of
    32 MiB up mapped and returned, the heap's free top beyond 64 MiB given back, now too). Returns whether glibc
    took it: older releases refuse an mmap threshold above HEAP_MAX_SIZE / 2 (32 MiB), and there the heap is not
    kept.

    Args:
        kept: True for the kept heap, False for glibc's steady state.
    """
    libc = _glibc()
    if libc is None:
        return False
    threshold = KEPT if kept else DEFAULT
    if not libc.mallopt(M_MMAP_THRESHOLD, threshold):
        return False
    libc.mallopt(M_TRIM_THRESHOLD, 2 * threshold)
    if not kept:
        libc.malloc_trim(0)
    return True


@contextlib.contextmanager
def kept_heap(device: torch.device) -> Iterator[bool]:
    """Within the block, freed activations are kept for reuse (`set_heap(True)`) where the run is on the CPU, glibc
    allocates and the fast paths run; glibc's steady state after it. Yields whether the heap is kept.

    Args:
        device: the run's device.
    """
    kept = device.type == "cpu" and fast.enabled(torch.empty(0)) and set_heap(True)
    try:
        yield kept
    finally:
        if kept:
            set_heap(False)
