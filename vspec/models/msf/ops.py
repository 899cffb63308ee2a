"""MSF's functions (Kobayashi, "Mean-shift feature transformer"): Gaussian-kernel attention through the
fused dot-product kernel (footnote 2). Its grouped projections (Sec. 2.3) are the core's (`vspec.ops.vit`: any
attention's projections may be grouped and tied)."""

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ...ops import fast
from ...ops.attention import sdpa
from ...ops.precision import autocast_on

__all__ = ["gaussian_attention", "gaussian_attention_sdpa", "gaussian_channels"]

_FLASH = fast.private_op("aten", "_scaled_dot_product_flash_attention_for_cpu")
_FLASH_BACKWARD = fast.private_op("aten", "_scaled_dot_product_flash_attention_for_cpu_backward")


def gaussian_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
                       dropout_p: float = 0.0, mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
    """sum_i softmax_i((q.k_i - 1/2 |k_i|^2) * scale) v_i over the last two axes (..., N, d), scale
    defaulting to d ** -0.5: the Gaussian kernel softmax_i(-1/2 |k_i - q|^2 * scale), since the
    |q|^2 term is one per query (footnote 2).

    The per-key bias -1/2 |k_i|^2 rides in one extra channel, q' = [q, -1/2], k' = [k, |k|^2], so that
    q'.k' = q.k - 1/2 |k|^2 and the whole of it is one fused (flash) attention without a mask: no n x n
    map is held, and the bias's gradient flows through |k|^2. v gets a zero channel (the CPU flash kernel
    wants equal widths), dropped from the output. A float mask of -1/2 |k|^2 would be the same softmax,
    but a mask that needs a gradient sends SDPA to its math fallback (the n x n map, held for backward):
    benchmarks/msf.py measures both. Where the fast paths run (`fast.enabled`) without dropout the kernel is called
    directly (`_CpuFlashGaussian`, a hand-written backward); elsewhere (CUDA, where the width is padded
    to a multiple of 8 for the fused kernels; tracing, compiling, profiling) it is
    F.scaled_dot_product_attention on q', k', v' under autograd, which also takes SDPA's `mask` (boolean:
    True may attend) and `causal` (text bodies: padding and causal masks).

    Args:
        q: (..., N, d) queries.
        k: (..., N, d) keys.
        v: (..., N, d_v) values.
        scale: the logits' factor; None: d ** -0.5.
        dropout_p: attention dropout.
        mask: SDPA's attention mask (boolean: True may attend); None: none.
        causal: whether each query sees only the keys up to its own position.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if dropout_p == 0.0 and mask is None and not causal and _cpu_flash_ok(q, k, v):
        return _CpuFlashGaussian.apply(q, k, v, scale)
    return gaussian_attention_sdpa(q, k, v, scale, dropout_p, mask, causal)


def gaussian_attention_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                            dropout_p: float = 0.0, mask: torch.Tensor | None = None,
                            causal: bool = False) -> torch.Tensor:
    """gaussian_attention as F.scaled_dot_product_attention on q', k', v' (gaussian_channels) under
    autograd: the path wherever the CPU kernel is not called directly.

    Args:
        q: (..., N, d) queries.
        k: (..., N, d) keys.
        v: (..., N, d_v) values.
        scale: the logits' factor.
        dropout_p: attention dropout.
        mask: SDPA's attention mask; None: none.
        causal: whether each query sees only the keys up to its own position.
    """
    q2, k2, v2 = gaussian_channels(q, k, v)
    out = sdpa(q2, k2, v2, attn_mask=mask, dropout_p=dropout_p, is_causal=causal, scale=scale)
    return out[..., :v.shape[-1]]


def gaussian_channels(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """q' = [q, -1/2], k' = [k, |k|^2], v' = [v, 0] (padded with zeros to a multiple of 8 on CUDA):
    q'.k' = q.k - 1/2 |k|^2, and the attention of q', k', v' is that of the Gaussian kernel in its
    first v.shape[-1] channels (pass the scale of the original width).

    Args:
        q: (..., N, d) queries.
        k: (..., N, d) keys.
        v: (..., N, d_v) values.
    """
    pad = (-(q.shape[-1] + 1)) % 8 if q.is_cuda else 0
    zeros = [q.new_zeros((*q.shape[:-1], pad))] if pad else []
    q2 = torch.cat([q, q.new_full((*q.shape[:-1], 1), -0.5), *zeros], dim=-1)  # one copy each
    k2 = torch.cat([k, k.square().sum(-1, keepdim=True), *zeros], dim=-1)
    return q2, k2, F.pad(v, (0, q2.shape[-1] - v.shape[-1]))


def _cpu_flash_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    return (_FLASH is not None and _FLASH_BACKWARD is not None and fast.enabled(q) and q.ndim == 4
            and q.dtype in (torch.float32, torch.float64)
            and q.dtype == k.dtype == v.dtype and q.shape[-1] == v.shape[-1] and not autocast_on("cpu"))


def _widened(x: torch.Tensor, last: float | torch.Tensor) -> torch.Tensor:
    """[x, last] for x (b, h, n, d), laid out (b, n, h, d + 1) in memory like the flash kernel's output:
    one copy; `last` a number or a (b, h, n) tensor."""
    b, h, n, d = x.shape
    out = x.new_empty(b, n, h, d + 1).transpose(1, 2)
    out[..., :d] = x
    out[..., d] = last
    return out


class _CpuFlashGaussian(torch.autograd.Function):
    """gaussian_attention on PyTorch's CPU flash kernel, called directly: q', k', v' built with one copy
    each, and the backward written out, so that none of the widening's own autograd nodes (the
    concatenations, the slice, |k|^2) costs a pass: grad' = [grad, 0]; the kernel's backward gives
    dq', dk', dv'; dk = dk'[:d] + 2 k dk'[d] (the |k|^2 channel). Not twice differentiable (nor is SDPA's
    flash backward)."""

    @staticmethod
    def forward(ctx, q, k, v, scale):
        d = q.shape[-1]
        q2, k2, v2 = _widened(q, -0.5), _widened(k, k.square().sum(-1)), _widened(v, 0.0)
        out, lse = _FLASH(q2, k2, v2, 0.0, False, attn_mask=None, scale=scale)
        ctx.save_for_backward(q2, k2, v2, out, lse)
        ctx.scale = scale
        return out[..., :d]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q2, k2, v2, out, lse = ctx.saved_tensors
        d = grad.shape[-1]
        dq, dk, dv = _FLASH_BACKWARD(_widened(grad, 0.0), q2, k2, v2, out, lse, 0.0, False, attn_mask=None,
                                     scale=ctx.scale)
        return dq[..., :d], dk[..., :d].addcmul_(k2[..., :d], dk[..., d:], value=2.0), dv[..., :d], None
