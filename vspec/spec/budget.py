"""What a model costs in memory, from its spec alone (no torch): the size guard of `vspec build`,
`vspec profile` and `vspec.build`.

`estimate(spec, batch)` counts the bytes of the weights and buffers the compiler will allocate
(float32; int64 index buffers), with the layout's shapes, and of the forward pass's working set on a
batch: the input plus the largest block's live tensors (its attention scores included). Both err
upwards (every norm counted with its statistics, the working set a few tensors wide), within a small
factor of what torch allocates. `check(spec, batch)` compares them with the memory available now and
raises `MemoryBudgetError` (a SpecError and a MemoryError) with both figures.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import EllipsisType
from typing import Any

from attrs import frozen

from .core import SpecError
from .dhvt import SOPE
from .layout import Tokens, embedded, layout
from .model import Block, Model
from .refiner import ConvStem, Refine, RefinerAttention
from .sot import EPN, GCP, GAPPool, LearnableScale, MGCrP, NoNorm, ReprLayerNorm, SecondOrderHead, SoTEmbed, SvPN
from .swin import WindowMHSA
from .vit import MLP, ClassTokenHead, GAPHead, Norm, PatchEmbed, SimplePatchEmbed

F32, I64 = 4, 8  # bytes per weight / per index

# torch refuses a tensor of 2**63 bytes or more ("Storage size calculation overflowed"), even on meta
TORCH_LIMIT = 2**63
# host memory of the Python objects per block, weights aside (measured ~34 KiB and ~4.5 KiB at depth 20000):
# a built block's modules; a repeat of a tied block (the profiler's model), its list entry and its part
HOST_PER_BLOCK, HOST_PER_TIED_BLOCK = 64 * 2**10, 8 * 2**10


class MemoryBudgetError(SpecError, MemoryError):
    """A spec whose model would not fit in the memory available (or not in a torch tensor at all)."""


@frozen
class Budget:
    """Bytes: `params` (weights and buffers of the whole model), `distinct_params` (repeated blocks
    once: the profiler's tied model), `activations` (one forward pass on the batch, no gradients),
    `largest` (the largest single tensor, weight or activation), `blocks` (how many: each costs host
    memory for its Python objects on any device)."""

    params: int
    distinct_params: int
    activations: int
    largest: int
    blocks: int

    def host(self, tied: bool) -> int:
        """Bytes of the blocks' Python objects, weights aside."""
        return self.blocks * (HOST_PER_TIED_BLOCK if tied else HOST_PER_BLOCK)


def _norm(spec: Norm | None, channels: int) -> int:
    """Elements of a norm: LayerNorm's scale and shift; BatchNorm's, its running statistics and count."""
    if spec is None or spec.kind == "none":
        return 0
    return 2 * channels if spec.kind == "layernorm" else 4 * channels + 2


def _linear(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + n_out * bias


def _bn(c: int) -> int:
    return _norm(Norm(kind="batchnorm"), c)


# ---------------------------------------------------------------- embedders: (spec, in_chans, dim) -> elements
def _sot_blocks(spec: SoTEmbed) -> int:
    """SoT's three resolution-halving blocks (vspec/nn/sot.py)."""
    total, c = 0, spec.stem_dim
    for stride in spec.strides:
        if spec.block == "dense":  # 6 layers growing by 16, then the transition to 128
            total += sum(_norm(spec.dense_norm, c + 16 * i) + (c + 16 * i) * 32 + _norm(spec.dense_norm, 32)
                         + 32 * 16 * 9 for i in range(6)) + _bn(c + 96) + (c + 96) * 128
            c = 128
        elif spec.block == "resnet":
            total += c * 64 + 64 * 64 * 9 + 64 * 256 + _bn(64) * 2 + _bn(256) + (c * 256 + _bn(256)) * (stride != 1)
            c = 256
        elif spec.block == "inception":
            total += c * 96 + 32 * 64 * 9 + 16 * 16 * 25 + 2 * _bn(32) + _bn(64) + 3 * _bn(16)  # 4 branches
            c = 128
        else:  # nonlocal
            total += c * 128 * 9 + 2 * _bn(128) + 3 * _linear(128, 64) + _linear(64, 128)
            c = 128
    return total + c  # the transition's bias; its weight is counted with the width


def _embedder(spec: Any, in_chans: int, dim: int) -> int:
    if isinstance(spec, PatchEmbed):
        return _linear(in_chans * spec.patch_size**2, dim, spec.bias) + _norm(spec.norm, dim)
    if isinstance(spec, SimplePatchEmbed):
        patch = in_chans * spec.patch_size**2
        return _norm(spec.norm, patch) + _linear(patch, dim) + _norm(spec.norm, dim)
    if isinstance(spec, SoTEmbed):
        width = 256 if spec.block == "resnet" else 128
        return _linear(in_chans * 9, spec.stem_dim) + _sot_blocks(spec) + width * dim + dim
    if isinstance(spec, SOPE):
        total, c = 2 * in_chans * spec.pre_affine + 2 * dim * spec.post_affine, in_chans
        for i in range(spec.units):
            out = dim // 2 ** (spec.units - 1 - i)
            total += c * out * 9 + _norm(spec.norm, out)
            c = out
        return total
    if isinstance(spec, ConvStem):
        w, p = spec.width, spec.patch_size // 2
        convs = in_chans * w * 49 + 18 * w * w + 72 * w * w + _linear(4 * w * p * p, dim)
        return convs + _bn(w) + _bn(2 * w) + _bn(4 * w)
    raise TypeError(f"no estimate for embedder {type(spec).__name__}")


# ---------------------------------------------------------------- blocks
def _refine(spec: Refine, heads: int) -> int:
    wide, k = heads * spec.expansion, spec.kernel
    if spec.form == "released":
        return heads * wide + _bn(wide) + wide * k * k + _bn(wide) + wide * heads + 2 * _bn(heads)
    dla = wide * k * (2 if spec.constraint == "row_col" else k)
    return heads * wide * spec.expand + dla + wide * heads * spec.reduction


def _attention(spec: Any, tokens: Tokens) -> tuple[int, int]:
    """(weight elements, index bytes) of an attention."""
    d, inner = tokens.dim, spec.inner_dim(tokens.dim)
    weights = _linear(d, 3 * inner, spec.qkv_bias) + _linear(inner, d, spec.proj_bias)
    if isinstance(spec, RefinerAttention):  # q, k unless reused; values and output for every map used
        widths = spec.role_widths(d)
        refine = _refine(spec.refine, spec.heads) if spec.refine is not None else 0
        return _linear(d, sum(widths.values()), spec.qkv_bias) + _linear(widths["V"], d) + refine, 0
    if spec.projections is not None:  # tied / grouped roles: the distinct matrices
        shapes = spec.projections.matrices(spec.roles, d, inner, spec.probe_width(d))
        inputs = sum(spec.role_widths(d).values())
        weights = sum(o * i for o, i in shapes.values()) + inputs * spec.qkv_bias + d * spec.proj_bias
    if not isinstance(spec, WindowMHSA):
        return weights, 0
    wh, ww = spec.window_size(tokens.grid)
    area, windows = wh * ww, tokens.patches // (wh * ww)
    table = (2 * wh - 1) * (2 * ww - 1) * spec.heads
    shift = area * area * windows * F32 + 2 * tokens.patches * I64  # mask, token order and its inverse
    return weights + table, area * area * I64 + shift


def _ffn(spec: Any, dim: int) -> int:
    h = spec.hidden_dim(dim)
    if isinstance(spec, MLP):
        return _linear(dim, h, spec.bias) + _linear(h, dim, spec.bias) + dim * (spec.layer_scale is not None)
    total = _linear(dim, h) + _norm(spec.norm, h) + _linear(h, dim) + _norm(spec.norm, dim)
    if spec.spatial != "none":
        total += (h * spec.kernel**2 + h) * (spec.spatial == "dwconv") + _norm(spec.norm, h)
    if spec.cls != "identity":
        total += _linear(dim, dim // spec.se_reduction) + _linear(dim // spec.se_reduction, dim)
    return total


def _block(spec: Block, tokens: Tokens) -> int:
    """Bytes of one block."""
    d = tokens.dim
    attention, index = _attention(spec.attention, tokens)
    elements = 2 * _norm(spec.norm, d) + attention + _ffn(spec.ffn, d) + 2 * d * (spec.layer_scale is not None)
    if spec.head_tokens is not None:
        heads = spec.attention.heads
        elements += heads * d + _linear(d // heads, d) + _norm(spec.head_tokens.norm, d // heads)
    return elements * F32 + index


# ---------------------------------------------------------------- heads
REPR_NORMS: dict[type, Callable[[int], int]] = {
    SvPN: lambda size: size, EPN: lambda size: 0, LearnableScale: lambda size: 1,
    ReprLayerNorm: lambda size: 2 * size, NoNorm: lambda size: 0,
}


def _head(spec: Any, dim: int, classes: int) -> int:
    """Bytes of the head."""
    if isinstance(spec, (ClassTokenHead, GAPHead)):
        norm = _norm(spec.norm, dim) if isinstance(spec, GAPHead) else 0
        fcs = 1 + (getattr(spec, "dense", None) is not None)  # the dense head's aux classifier
        return (norm + fcs * _linear(dim, classes) * (classes > 0)) * F32
    assert isinstance(spec, SecondOrderHead)
    r = spec.repr_dim(dim)
    pool, index = 0, 0
    if isinstance(spec.pool, MGCrP):
        pool = dim * spec.pool.heads * (spec.pool.m + spec.pool.n)
    elif isinstance(spec.pool, GCP):
        pool, index = dim * spec.pool.dim, 2 * r * I64
    else:
        assert isinstance(spec.pool, GAPPool)
    fc = _linear(dim, classes) + _linear(r, classes) if spec.fusion in ("sum", "late") else \
        _linear(r + dim * (spec.fusion == "concat"), classes)
    norm_size = spec.repr_shape(dim)[-1] if isinstance(spec.norm, SvPN) else r
    return (pool + REPR_NORMS[type(spec.norm)](norm_size) + fc * (classes > 0)) * F32 + index


# ---------------------------------------------------------------- activations
def _block_activations(spec: Block, tokens: Tokens, batch: int) -> int:
    """Elements live while a block runs: its input, the residual, qkv, the attention output, the
    hidden units, and the attention scores (per window for window attention)."""
    extra = spec.attention.heads if spec.head_tokens is not None else 0
    n, d, inner = tokens.length + extra, tokens.dim, spec.attention.inner_dim(tokens.dim)
    keys = n
    if isinstance(spec.attention, WindowMHSA):
        wh, ww = spec.attention.window_size(tokens.grid)
        keys = wh * ww
    scores = spec.attention.heads * n * keys
    if isinstance(spec.attention, RefinerAttention) and spec.attention.refine is not None:
        scores *= 2 * spec.attention.refine.expansion  # the expanded maps, before and after DLA
    return batch * (n * (4 * d + 4 * inner + 2 * spec.ffn.hidden_dim(d)) + 2 * scores)


def _embedder_activations(spec: Any, in_chans: int, size: tuple[int, int], first: Tokens, batch: int) -> int:
    pixels = size[0] * size[1]
    if isinstance(spec, SoTEmbed):  # the stem's map at full resolution; the first block's, up to 352 wide, at half
        wide = 2 * spec.stem_dim * pixels + 2 * (spec.stem_dim + 352) * (pixels // 4)
    elif isinstance(spec, SOPE):  # the first unit's map at half resolution
        wide = 2 * (first.dim // 2 ** (spec.units - 1)) * (pixels // 4)
    else:
        wide = 2 * in_chans * pixels
    return batch * (wide + 3 * first.length * first.dim)


def _head_activations(spec: Any, tokens: Tokens, classes: int, batch: int) -> int:
    size = tokens.dim + classes
    if getattr(spec, "dense", None) is not None:  # the aux logits of every patch token
        size += tokens.patches * (tokens.dim + classes)
    if isinstance(spec, SecondOrderHead):
        pool = spec.pool
        inner = pool.heads * (pool.m + pool.n) if isinstance(pool, MGCrP) else getattr(pool, "dim", 0)
        size += 4 * tokens.length * inner + 4 * spec.repr_dim(tokens.dim) + 8 * getattr(pool, "dim", 0) ** 2
    return batch * size


# ---------------------------------------------------------------- the model
def estimate(spec: Model, batch: int = 1) -> Budget:
    """Bytes of `spec`'s model and of one forward pass on `batch` images (see the module docstring)."""
    first, stages = embedded(spec), layout(spec)
    last, last_block = stages[-1].tokens, spec.stages[-1].block
    last_block = last_block if isinstance(last_block, Block) else last_block[-1]  # (`.blocks` would repeat it)
    embedder = _embedder(spec.embedder, spec.in_chans, first.dim) * F32
    head = _head(spec.head, last.dim, spec.num_classes)
    root = (first.dim * spec.class_token + first.length * first.dim * (spec.pos_embed != "none")
            + _norm(last_block.norm, last.dim) * spec.final_norm) * F32
    params = distinct = embedder + head + root
    image = batch * spec.in_chans * spec.img_size[0] * spec.img_size[1] * F32
    work = max(_embedder_activations(spec.embedder, spec.in_chans, spec.img_size, first, batch),
               _head_activations(spec.head, last, spec.num_classes, batch)) * F32
    largest = max(embedder, head, root, image, work)  # no tensor is larger than the part that holds it
    for stage, shape in zip(spec.stages, stages):
        t = shape.tokens
        if stage.entry is not None:
            e = shape.entry_in
            entry = (_norm(stage.entry.norm, 4 * e.dim) + _linear(4 * e.dim, t.dim, stage.entry.bias)) * F32
            params, distinct = params + entry, distinct + entry
            work = max(work, batch * (2 * e.length * e.dim + 4 * t.length * (e.dim + t.dim)) * F32)
            largest = max(largest, entry, work)
        # the profiler's tied model builds one block per (spec, variant: Swin's shift parity, handing maps on)
        listed = isinstance(stage.block, tuple)
        indices = range(stage.depth) if listed else sorted({0, min(1, stage.depth - 1), stage.depth - 1})
        keys: dict[Any, int] = {}
        for j in indices:
            block = stage.block[j] if listed else stage.block
            size = keys.setdefault((block, block.variant(t, j), stage.hands_on(j)), _block(block, t))
            params += size if listed else 0
            work = max(work, _block_activations(block, t, batch) * F32)
            largest = max(largest, size, work)
        params += 0 if listed else _block(stage.block, t) * stage.depth
        distinct += sum(keys.values())
    return Budget(params, distinct, image + work, largest, spec.depth)


CGROUP_ROOT = "/sys/fs/cgroup"
UNLIMITED = 2**62  # a cgroup v1 "limit" at least this large is none (the kernel writes 2**63 - 4096)


def available(cgroup_root: str | os.PathLike | None = None) -> int | None:
    """Bytes of memory this process can still allocate: the smallest of what applies among
    /proc/meminfo's MemAvailable (else the free physical pages), what an address-space or data limit
    (`ulimit -v`: RLIMIT_AS over /proc/self/status's VmSize; `ulimit -d`: RLIMIT_DATA over VmData) leaves,
    and what the memory limit of the process's cgroup and of each of its ancestors leaves (v2: memory.max
    minus memory.current; v1: memory.limit_in_bytes minus memory.usage_in_bytes; the reclaimable page cache,
    memory.stat's inactive_file, counted as free). `cgroup_root` (default: $VSPEC_CGROUP_ROOT, else
    /sys/fs/cgroup) is where the hierarchy is mounted. None when nothing is known."""
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
        import resource
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


def size(n: int) -> str:
    """Bytes, readable at any size: `512 KiB`, `71.6 GiB`, `4.47e+10 TiB`."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            value = n / scale
            return f"{value:.3g} {unit}" if value < 1e5 else f"{value:.2e} {unit}"
    return f"{n} bytes"


def check_representable(budget: Budget) -> None:
    """Refuse a model one of whose tensors torch cannot even describe (2**63 bytes or more)."""
    if budget.largest >= TORCH_LIMIT:
        raise MemoryBudgetError("", f"too large for torch: its largest tensor would take {size(budget.largest)}, "
                                    f"beyond torch's limit of {size(TORCH_LIMIT)} per tensor (even on the meta device)")


def check(spec: Model, batch: int = 1, *, weights: str | None = "all", free: int | None | EllipsisType = ...,
          what: str = "building it") -> Budget:
    """Raise MemoryBudgetError when the model's weights (`weights`: "all", "distinct" for the tied
    model, None on the meta device), its Python objects and a forward pass on `batch` images (0: none)
    need more than `free` bytes (default: `available()`; None skips this comparison); returns the
    estimate. A tensor beyond torch's limit is refused in any case."""
    budget = estimate(spec, max(batch, 1))
    check_representable(budget)
    free = available() if free is ... else free
    parts = {"weights": {"all": budget.params, "distinct": budget.distinct_params, None: 0}[weights],
             f"for a forward pass at batch {batch}": budget.activations if batch else 0,
             f"for the module objects of {budget.blocks:,} blocks": budget.host(tied=weights != "all")}
    need = sum(parts.values())
    if free is not None and need > free:
        detail = ", ".join(f"{size(n)} {'of ' * (k == 'weights')}{k}" for k, n in parts.items() if n)
        raise MemoryBudgetError("", f"{what} needs about {size(need)} ({detail}) but only {size(free)} of memory is "
                                    "available")
    return budget
