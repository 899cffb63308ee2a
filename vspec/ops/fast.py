"""The one switch for vspec's hand-written CPU fast paths (like timm's `use_fused_attn`).

Every fast path (oneDNN's fused linear in `vit.linear`, the direct CPU flash kernel in
`msf.gaussian_attention`, Swin's written-out biased attention in training, Refiner's channels-last folded
eval of its stem and DLA) asks `enabled(x)` and then only its own dtype / shape applicability; where it
says False the plain ops run. It is False unless: x is on the CPU, eager (not JIT-traced as in fvcore, not
compiled, no dispatch mode such as FlopCounterMode, no functorch transform), and the switch is on. The
switch starts from the environment (VSPEC_FAST_PATHS=0 / false / off turns every fast path off) and
`fast_paths(False)` (exported as `vspec.fast_paths`) turns them off within a block. Paths calling private
torch ops also ask `private_op(...)`: the op exists and torch is within the versions they were tested on."""

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["TESTED_TORCH", "enabled", "fast_paths", "private_op"]
# torch versions the private-op paths were written and tested for: [2.4, 2.15)
TESTED_TORCH = ((2, 4), (2, 15))

_on = os.environ.get("VSPEC_FAST_PATHS", "1").strip().lower() not in ("0", "false", "off", "no")


def _torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def private_op(namespace: str, name: str):
    """torch.ops.<namespace>.<name>, or None when it is missing or torch is outside TESTED_TORCH.

    Args:
        namespace: the op's namespace under torch.ops ("mkldnn", ...).
        name: the op's name.
    """
    low, high = TESTED_TORCH
    if not low <= _torch_version() < high:
        return None
    try:
        return getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return None


def _is_on() -> bool:
    """The switch alone (environment or `fast_paths`), without the per-tensor conditions."""
    return _on


def enabled(x: torch.Tensor) -> bool:
    """True where vspec's fast paths may run on x: the switch is on and x is an eager CPU tensor outside
    tracing, compiling, dispatch modes and functorch transforms (so that profilers see the plain ops).

    Args:
        x: the tensor a fast path would run on.
    """
    return (_on and x.device.type == "cpu" and not torch.jit.is_tracing() and not torch.compiler.is_compiling()
            and torch._C._len_torch_dispatch_stack() == 0 and not torch._C._are_functorch_transforms_active())


@contextmanager
def fast_paths(on: bool) -> Iterator[None]:
    """Within the block, vspec's fast paths are on (True) or off (False); the previous state after it.

    Args:
        on: True turns the fast paths on within the block, False off.
    """
    global _on
    before, _on = _on, bool(on)
    try:
        yield
    finally:
        _on = before
