"""Mixed precision: the numerically sensitive functions (SVD, power iteration, Newton-Schulz,
covariance, EPN) compute in float32 even under bfloat16 / float16 autocast, like
`torch.amp.custom_fwd(cast_inputs=torch.float32)` but with the autocast device taken from the inputs (attention in
half precision on every CPU: `attention.sdpa`); `native_bf16`, whether this CPU computes bfloat16 natively (what
`vspec train --precision auto` picks by); and `bf16_stream`, whether bf16-autocast inference carries the token stream
in bfloat16."""

import functools

import torch

from .._moved import moved as _moved
from . import fast

__all__ = ["autocast_on", "bf16_autocast_on", "bf16_stream", "float32", "native_bf16"]
_HALF = (torch.bfloat16, torch.float16)


def _cpu_has(check: str) -> bool:
    """torch's private CPU check `torch.cpu.<check>()`; False where this torch has none, or it fails."""
    try:
        return bool(getattr(torch.cpu, check)())
    except Exception:  # noqa: BLE001 - a private function: absent or changed means "no"
        return False


def _onednn_takes_bf16() -> bool:
    """Whether oneDNN takes its bf16 path on this CPU, as torch reports it (also true on AVX-512 without BF16, where
    it emulates)."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(torch.backends.mkldnn.is_available() and check is not None and check())
    except RuntimeError:
        return False


def native_bf16() -> str | None:
    """What lets this CPU compute bfloat16 matrix products natively: "AMX" (Intel's tile unit), "AVX-512 BF16", or
    None (then bfloat16 is emulated, slower than float32). Read from torch's own CPU checks, and only where oneDNN,
    which runs the CPU's bfloat16 matrix products, takes its bfloat16 path (`_onednn_takes_bf16`: not
    without oneDNN, nor where ONEDNN_MAX_CPU_ISA caps it below AVX-512). ATen's kernel level does not count: under
    ATEN_CPU_CAPABILITY=avx2 oneDNN still dispatches to AMX, and `attention.sdpa` routes around the flash kernel
    that fails there."""
    if not _onednn_takes_bf16():
        return None
    return "AMX" if _cpu_has("_is_amx_tile_supported") else "AVX-512 BF16" if _cpu_has(
        "_is_avx512_bf16_supported") else None


_NATIVE_BF16 = native_bf16() is not None


def bf16_stream(x: torch.Tensor) -> bool:
    """Whether the model carries its token stream (the residual adds, the LayerNorms' inputs and outputs) in bfloat16:
    bf16-autocast inference (autograd off) on a CPU that computes bf16 natively, fast paths on (`fast.enabled`).
    Every matrix product there runs in bf16 anyway; a bf16 stream halves the bytes the adds and norms move and skips
    the float32 -> bf16 cast before each linear. Its logits stay as close to float32's as those of the model cast
    wholesale to bf16 (tests/nn/test_bf16.py); training keeps the float32 stream autocast gives.

    Args:
        x: the stream's first tensor (after the embedding).
    """
    return (_NATIVE_BF16 and not torch.is_grad_enabled() and x.is_floating_point() and fast.enabled(x)
            and bf16_autocast_on("cpu"))


def bf16_autocast_on(device_type: str) -> bool:
    """Whether bfloat16 autocast is active for tensors on `device_type`.

    Args:
        device_type: a device type ("cpu", "cuda", ...).
    """
    return autocast_on(device_type) and torch.get_autocast_dtype(device_type) == torch.bfloat16


def autocast_on(device_type: str) -> bool:
    """Whether autocast is active for tensors on `device_type` (never for meta and other devices
    without autocast).

    Args:
        device_type: a device type ("cpu", "cuda", "meta", ...).
    """
    return torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)


def _up(x):
    return x.float() if isinstance(x, torch.Tensor) and x.dtype in _HALF else x


def float32(fn):
    """Decorator: under autocast on the device of the first tensor argument, run `fn` with autocast off
    and its bfloat16 / float16 tensor arguments upcast to float32 (float64 ones stay), so its result is
    float32 (autocast casts it where the next op wants). Without autocast `fn` runs on its inputs as
    they are.

    Args:
        fn: the function run in float32 (its first tensor argument's device decides).
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        device = next(a.device.type for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor))
        if not autocast_on(device):
            return fn(*args, **kwargs)
        with torch.autocast(device, enabled=False):
            return fn(*map(_up, args), **{k: _up(v) for k, v in kwargs.items()})

    return wrapper


def __getattr__(name: str):  # the previous release's names (vspec/_moved.py)
    return _moved(__name__, name)
