"""What a model costs in memory: the size guard of `vspec build`, `vspec profile` and `vspec.build`.

The weights are counted on the model built on the meta device (`vspec.compiler.weights`: no per-kind formula
here). What must be decided before torch builds anything stays here, torch-free: the per-tensor size limit, the
host memory of the blocks' Python objects, the working set of a forward pass (the input plus the largest
component's, from each kind's `working_set`, `vspec/spec/kinds.py`; it errs upwards, within a small factor of what
torch allocates), the memory available now, and `check`, which raises `MemoryBudgetError` (a SpecError and a
MemoryError) with every figure in one line.
"""

from __future__ import annotations

import os
from types import EllipsisType

from attrs import frozen

from .._moved import moved as _moved
from .errors import SpecError
from .layout import embedded, layout
from .model import Model

__all__ = ["MemoryBudgetError", "TORCH_LIMIT", "WeightBytes", "activations", "available", "check", "nbytes", "size"]
F32 = 4  # bytes per activation element

# torch refuses a tensor of 2**63 bytes or more ("Storage size calculation overflowed"), even on meta
TORCH_LIMIT = 2**63
# host memory of the Python objects per block, weights aside (measured ~34 KiB and ~4.5 KiB at depth 20000):
# a built block's modules; a repeat of a tied block (the profiler's model), its list entry and its part
HOST_PER_BLOCK, HOST_PER_TIED_BLOCK = 64 * 2**10, 8 * 2**10


class MemoryBudgetError(SpecError, MemoryError):
    """A spec whose model would not fit in the memory available (or not in a torch tensor at all)."""


@frozen
class WeightBytes:
    """Bytes of the weights and buffers a build allocates: `params` (every block its own), `distinct` (repeated
    blocks once: the profiler's tied model) and `largest` (the largest tensor). `vspec.compiler.weights` counts
    them on the meta device."""

    params: int
    distinct: int
    largest: int


def activations(spec: Model, batch: int = 1) -> tuple[int, int]:
    """(bytes, largest tensor's bytes) of one forward pass on `batch` images without gradients: the input plus the
    largest working set of any component (embedder, entry, block, head).

    Args:
        spec: the model spec.
        batch: the images of the forward pass.
    """
    first, stages = embedded(spec), layout(spec)
    work = max(spec.embedder.working_set(spec.img_size, spec.in_chans, first),
               spec.head.working_set(stages[-1].tokens, spec.num_classes))
    for stage, shape in zip(spec.stages, stages):
        if stage.entry is not None:
            work = max(work, stage.entry.working_set(shape.entry_in, shape.tokens))
        work = max([work] + [block.working_set(shape.tokens) for _, block in stage.named_blocks()])
    image = spec.in_chans * spec.img_size[0] * spec.img_size[1]
    return F32 * batch * (image + work), F32 * batch * max(image, work)


CGROUP_ROOT = "/sys/fs/cgroup"
UNLIMITED = 2**62  # a cgroup v1 "limit" at least this large is none (the kernel writes 2**63 - 4096)


def available(cgroup_root: str | os.PathLike | None = None) -> int | None:
    """Bytes of memory this process can still allocate: the smallest of what applies among
    /proc/meminfo's MemAvailable (else the free physical pages), what an address-space or data limit
    (`ulimit -v`: RLIMIT_AS over /proc/self/status's VmSize; `ulimit -d`: RLIMIT_DATA over VmData) leaves,
    and what the memory limit of the process's cgroup and of each of its ancestors leaves (v2: memory.max
    minus memory.current; v1: memory.limit_in_bytes minus memory.usage_in_bytes; the reclaimable page cache,
    memory.stat's inactive_file, counted as free). `cgroup_root` (default: $VSPEC_CGROUP_ROOT, else
    /sys/fs/cgroup) is where the hierarchy is mounted. None when nothing is known.

    Args:
        cgroup_root: where the cgroup hierarchy is mounted (None: $VSPEC_CGROUP_ROOT, else /sys/fs/cgroup).
    """
    root = cgroup_root if cgroup_root is not None else os.environ.get("VSPEC_CGROUP_ROOT") or CGROUP_ROOT
    known = [n for n in (_mem_available(), *_rlimits_left(), *_cgroups_left(str(root))) if n is not None]
    return max(min(known), 0) if known else None


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _rlimits_left() -> list[int]:
    """What RLIMIT_AS and RLIMIT_DATA (soft limits) leave above the process's address space and data now."""
    try:
        import resource  # platform
    except ImportError:  # not on this platform
        return []
    try:
        with open("/proc/self/status") as f:
            status = {k: v for k, _, v in (line.partition(":") for line in f)}
    except OSError:
        status = {}
    left = []
    for limit, field in (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")):
        try:
            soft = resource.getrlimit(getattr(resource, limit))[0]
            used = int(status[field].split()[0]) * 1024
        except (AttributeError, KeyError, ValueError, IndexError, OSError):
            continue
        if soft != resource.RLIM_INFINITY and soft >= 0:
            left.append(soft - used)
    return left


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError):
        return None


def _inactive_file(folder: str) -> int:
    try:
        with open(os.path.join(folder, "memory.stat")) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key in ("inactive_file", "total_inactive_file"):
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _cgroups_left(root: str) -> list[int]:
    """What the memory limits of this process's cgroups (v2 and v1, each folder from the process's own up to
    the root) leave."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = [line.strip().split(":", 2) for line in f if line.count(":") >= 2]
    except OSError:
        lines = []
    places = []  # (folder of the hierarchy, the process's path in it, limit file, usage file)
    for _, controllers, path in lines:
        if controllers == "":  # v2, mounted at the root or (a hybrid hierarchy) at root/unified
            unified = os.path.join(root, "unified")
            places.append((unified if os.path.isdir(unified) else root, path, "memory.max", "memory.current"))
        elif "memory" in controllers.split(","):
            places.append((os.path.join(root, "memory"), path, "memory.limit_in_bytes", "memory.usage_in_bytes"))
    if not lines:  # no /proc/self/cgroup (or an empty one): the hierarchy's root alone
        places = [(root, "/", "memory.max", "memory.current"),
                  (os.path.join(root, "memory"), "/", "memory.limit_in_bytes", "memory.usage_in_bytes")]
    left = []
    for base, path, limit_file, usage_file in places:
        parts = [p for p in path.split("/") if p and p != ".."]
        for depth in range(len(parts), -1, -1):
            folder = os.path.join(base, *parts[:depth])
            limit, usage = _read_int(os.path.join(folder, limit_file)), _read_int(os.path.join(folder, usage_file))
            if limit is not None and limit < UNLIMITED and usage is not None:
                left.append(limit - max(usage - _inactive_file(folder), 0))
    return left


def nbytes(tensors) -> int:
    """The bytes that `tensors` hold (each its elements times their size; torch's tensors, never imported here).

    Args:
        tensors: an iterable of tensors (anything with `numel()` and `element_size()`).
    """
    return sum(t.numel() * t.element_size() for t in tensors)


def size(n: int) -> str:
    """Bytes, readable at any size: `512 KiB`, `71.6 GiB`, `4.47e+10 TiB`.

    Args:
        n: a count of bytes.
    """
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            value = n / scale
            return f"{value:.3g} {unit}" if value < 1e5 else f"{value:.2e} {unit}"
    return f"{n} bytes"


def _check_representable(largest: int) -> None:
    """Refuse a model one of whose tensors torch cannot even describe (2**63 bytes or more).

    Args:
        largest: the bytes of the model's largest tensor.
    """
    if largest >= TORCH_LIMIT:
        raise MemoryBudgetError("", f"too large for torch: its largest tensor would take {size(largest)}, beyond "
                                    f"torch's limit of {size(TORCH_LIMIT)} per tensor (even on the meta device)")


def check(spec: Model, batch: int = 1, *, weights: WeightBytes | None = None, tied: bool = False,
          free: int | None | EllipsisType = ..., what: str = "building it") -> None:
    """Raise MemoryBudgetError when the weights (`weights`: None counts none, e.g. on the meta device; `tied`:
    the profiler's model, repeated blocks once), the blocks' Python objects and a forward pass on `batch` images
    (0: none) need more than `free` bytes (default: `available()`; None skips this comparison). A tensor beyond
    torch's limit is refused in any case.

    Args:
        spec: the model spec.
        batch: the images of the forward pass counted (0: none).
        weights: the model's weight sizes (`vspec.compiler.weights`); None counts none.
        tied: count repeated blocks' weights once (the profiler's model).
        free: the bytes free (default: `available()`; None skips the comparison).
        what: what needs the memory, as the message says it ("building it").
    """
    work, largest = activations(spec, max(batch, 1))
    _check_representable(max(largest, weights.largest if weights is not None else 0))
    free = available() if free is ... else free
    held = 0 if weights is None else weights.distinct if tied else weights.params
    parts = {"weights": held, f"for a forward pass at batch {batch}": work if batch else 0,
             f"for the module objects of {spec.depth:,} blocks": spec.depth * (HOST_PER_TIED_BLOCK if tied
                                                                                else HOST_PER_BLOCK)}
    need = sum(parts.values())
    if free is not None and need > free:
        detail = ", ".join(f"{size(n)} {'of ' * (k == 'weights')}{k}" for k, n in parts.items() if n)
        raise MemoryBudgetError("", f"{what} needs about {size(need)} ({detail}) but only {size(free)} of memory is "
                                    "available")


def __getattr__(name: str):  # Weights, WeightBytes' old name (vspec/_moved.py)
    return _moved(__name__, name)
