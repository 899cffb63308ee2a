"""Mixed precision: the numerically sensitive functions (SVD, power iteration, Newton-Schulz,
covariance, EPN) compute in float32 even under bfloat16 / float16 autocast, like
`torch.amp.custom_fwd(cast_inputs=torch.float32)` but with the autocast device taken from the inputs; and `sdpa`,
attention in half precision on every CPU."""

import functools

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

__all__ = ["autocast_on", "float32", "sdpa"]
_HALF = (torch.bfloat16, torch.float16)
# torch 2.14's CPU flash attention packs bfloat16 for AMX whenever the CPU has it, with a function built for
# AVX-512 only: under AVX2 (or default) kernels on an AMX CPU (ATEN_CPU_CAPABILITY=avx2 on a Xeon with AMX) it
# raises "pack_vnni2 is only supported when avx512 is supported" for 64 tokens and more, forward too
_FLASH_PACKS_WITHOUT_AVX512 = torch.backends.cpu.get_cpu_capability() in ("DEFAULT", "AVX2") and \
    bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> torch.Tensor:
    """`F.scaled_dot_product_attention(q, k, v, **kwargs)`; in half precision on a CPU whose flash kernel cannot run
    (above: AVX2 kernels on an AMX CPU), through SDPA's math backend, the same equation.

    Args:
        q: the queries (..., N, d).
        k: the keys (..., M, d).
        v: the values (..., M, dv).
        **kwargs: SDPA's own (attn_mask, dropout_p, is_causal, scale).
    """
    if _FLASH_PACKS_WITHOUT_AVX512 and q.dtype in _HALF and q.device.type == "cpu":
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, **kwargs)
    return F.scaled_dot_product_attention(q, k, v, **kwargs)


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
