"""Attention, softmax(q k^T * scale + mask) v (Vaswani et al. 2017, Eq. 1), the one entry every kind that reduces to
it calls: `sdpa`, F.scaled_dot_product_attention but for two cases.

- Half precision on a CPU whose flash kernel cannot run (below: AVX2 kernels on an AMX CPU): SDPA's math backend.
- bf16 training on the CPU at short sequences (`short_path`): `ShortAttention`, the map held for the backward. Its
  forward is two bf16 GEMMs (AMX / AVX-512 BF16 through oneDNN) and one softmax pass (in float32 for the row lengths
  torch's bf16 kernel is slow at, `float_softmax`), its backward four GEMMs and one
  softmax-backward pass, where SDPA's CPU flash kernel recomputes the map block by block in its backward and spends
  most of a bf16 training step there (benchmarks/attention.py measures both per shape and prints the choice). Taken
  where the keys and the whole map are small (`SHORT_KEYS`, `MAP_ELEMENTS`: vision and GLUE lengths) and the CPU
  computes bf16 natively; without autograd SDPA's flash forward, which holds no map, stays ahead on a CPU with AMX
  (without AMX ShortAttention is taken there too, `SHORT_INFERENCE`).
The switch of the fast paths (`fast.enabled`: eager CPU tensors, VSPEC_FAST_PATHS) turns `ShortAttention` off."""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import fast
from .dropout import keep_mask, keep_probability
from .precision import bf16_autocast_on, native_bf16

__all__ = ["FLOAT_SOFTMAX_VECTORS", "MAP_ELEMENTS", "SHORT_INFERENCE", "SHORT_KEYS", "ShortAttention",
           "float32_softmax_", "float_softmax", "sdpa", "short_path"]
_HALF = (torch.bfloat16, torch.float16)
# torch 2.14's CPU flash attention packs bfloat16 for AMX whenever the CPU has it, with a function built for
# AVX-512 only: under AVX2 (or default) kernels on an AMX CPU (ATEN_CPU_CAPABILITY=avx2 on a Xeon with AMX) it
# raises "pack_vnni2 is only supported when avx512 is supported" for 64 tokens and more, forward too
_FLASH_PACKS_WITHOUT_AVX512 = torch.backends.cpu.get_cpu_capability() in ("DEFAULT", "AVX2") and \
    bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())
# ShortAttention is taken up to SHORT_KEYS keys and a map of MAP_ELEMENTS (B x heads x N x M) in all, measured by
# benchmarks/attention.py. Xeon with AMX: 1.8-2.0x SDPA at 197 and 512 keys with maps up to 15 M elements, 2.7-6.7x
# for Swin's windows and BERT at 128-256 tokens, behind at 1024 keys (0.63-0.74x) and at 512 keys with a 25 M map
# (0.76-0.93x): 2^24 elements (32 MiB in bf16). AVX-512 BF16 without AMX (AMD EPYC, 2 threads), where SDPA's flash
# kernel is slower too: still ahead with the 25 M map (1.22-1.29x, 15 rounds; 1.00-1.37x at 1024 keys): 2^25.
# Inference runs in slices along the first axis (`_short_inference`): there the map counted is one slice's
SHORT_KEYS = 512
MAP_ELEMENTS = 2**24 if native_bf16() == "AMX" else 2**25


_NATIVE_BF16 = native_bf16() is not None  # AMX or AVX-512 BF16, where oneDNN takes bf16
# Without AMX (AVX-512 BF16 alone: AMD EPYC) SDPA's flash forward is behind too, autograd off: ShortAttention's
# forward, in slices, 1.6-2.5x ahead from Swin's windows to BERT at 512 tokens (`python -m benchmarks.attention
# --inference`, 11 rounds), so there inference takes it as well; with AMX SDPA's flash forward, which holds no map,
# stays ahead
SHORT_INFERENCE = native_bf16() == "AVX-512 BF16"


# torch's bf16 softmax over the last axis handles the last keys mod L of every row (L: the lanes of its bf16 vector, 32
# with AVX-512 kernels, 16 with AVX2) in slow code: `python -m benchmarks.softmax` times a cast to float32, float32's
# softmax and a cast back (`float32_softmax_`) at 1.7-2.4x faster than bf16's kernel for rows of 40 to 56 keys (Swin's
# 7 x 7 windows: 49) on the EPYC, behind at 32, 64, 96 or 128 keys and a tie at 197. `float_softmax` takes float32
# where the remainder is at least L / 4 keys and the row at least L / 2, up to FLOAT_SOFTMAX_VECTORS x L keys, beyond
# which the remainder's share of the row's time is too small to pay for the casts (AVX-512: 1.19x at 136, 0.92-1.15x
# at 168 in two runs; AVX2: 1.16x at 72, behind at 80 and 96)
_BF16_LANES = {"AVX512": 32, "AVX2": 16}.get(torch.backends.cpu.get_cpu_capability(), 0)
FLOAT_SOFTMAX_VECTORS = 5


def float_softmax(keys: int, lanes: int | None = None) -> bool:
    """Whether ShortAttention's bf16 softmax over rows of `keys` runs in float32 (cast, softmax, cast back), where
    torch's bf16 kernel leaves a long remainder of every row to slow code (above).

    Args:
        keys: the row's length (the keys).
        lanes: the bf16 vector's lanes of torch's CPU kernels (None: those of this process's kernels; 0: none).
    """
    lanes = _BF16_LANES if lanes is None else lanes
    return lanes > 0 and lanes // 2 <= keys <= FLOAT_SOFTMAX_VECTORS * lanes and keys % lanes >= lanes // 4


def short_path(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
               is_causal: bool = False, dropout_p: float = 0.0) -> bool:
    """Whether `sdpa` takes ShortAttention for these inputs: a bf16 (or bf16-autocast) CPU training step
    (`fast.enabled`, autograd on and an input that needs a gradient; inference too where `SHORT_INFERENCE`) on a CPU
    with native bf16 matmuls, at most SHORT_KEYS keys and MAP_ELEMENTS in the map, and a boolean mask (or the causal
    one) that leaves every query a key.

    Args:
        q: the queries (..., N, d).
        k: the keys (..., M, d).
        v: the values (..., M, dv).
        attn_mask: SDPA's mask (boolean: True may attend; float: added to the logits), or None.
        is_causal: whether query i sees keys up to i only.
        dropout_p: the dropout on the map (one that rounds to dropping everything, `dropout.keep_probability`, is
            SDPA's).
    """
    return _short_mask(q, k, v, attn_mask, is_causal, dropout_p)[0]


def _short_mask(q, k, v, attn_mask, is_causal, dropout_p=0.0) -> tuple[bool, torch.Tensor | None]:
    """(short_path's answer, the mask ShortAttention takes: attn_mask with the causal one folded in)."""
    if not (_NATIVE_BF16 and fast.enabled(q)):
        return False, None
    if not (q.dtype == k.dtype == v.dtype and (q.dtype == torch.bfloat16 or bf16_autocast_on("cpu"))):
        return False, None
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or (
        attn_mask is not None and attn_mask.requires_grad))
    if not (needs_grad or SHORT_INFERENCE) or q.ndim < 3 or (is_causal and q.shape[-2] > k.shape[-2]) or \
            keep_probability(dropout_p) == 0:
        return False, None
    first = 0 if needs_grad or not _sliceable(q, k, v, attn_mask) else 1  # inference: one slice's map
    if k.shape[-2] > SHORT_KEYS or q.shape[first:-1].numel() * k.shape[-2] > MAP_ELEMENTS:
        return False, None
    mask = _with_causal(q, k, attn_mask) if is_causal else attn_mask
    return mask is None or mask.dtype != torch.bool or bool(mask.any(-1).all()), mask


def _with_causal(q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
    """SDPA's is_causal as a mask (query i sees keys up to i), combined with attn_mask."""
    causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if attn_mask is None or attn_mask.dtype == torch.bool:
        return causal if attn_mask is None else attn_mask & causal
    return attn_mask.masked_fill(~causal, float("-inf"))


def _reduce_to(grad: torch.Tensor, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """grad summed over the axes a tensor of `shape` was broadcast along, then cast to dtype. The sum accumulates in
    float32 and is rounded to grad's dtype once (as a bf16 GEMM's output is): asked for a float32 result, torch's CPU
    sum casts all of a bf16 grad first, ten times the time."""
    lead = grad.ndim - len(shape)
    axes = [i for i in range(grad.ndim) if i < lead or (shape[i - lead] == 1 and grad.shape[i] != 1)]
    out = grad.sum(axes, keepdim=True) if axes else grad
    return out.reshape(shape).to(dtype)


def _masked_softmax(s: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(s + mask) over the last axis, in s's dtype; s may be overwritten. In float32 (`float32_softmax_`) where
    `float_softmax` says so for bf16 rows."""
    if s.dtype == torch.bfloat16 and float_softmax(s.shape[-1]):
        return float32_softmax_(s, mask)
    if mask is not None:  # a float mask in the logits' dtype, as SDPA takes it (a float32 one into bf16 is slow)
        s = s.masked_fill_(~mask, float("-inf")) if mask.dtype == torch.bool else s.add_(mask.to(s.dtype))
    return torch.softmax(s, -1)


def float32_softmax_(s: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(s + mask) over the last axis computed in float32, the mask added unrounded, written back into s (bf16)
    in slices of _SLICE_MAP elements along the first axis: a float32 copy of the whole map, allocated afresh at every
    call, is mapped and faulted in by glibc, which cost what the softmax saved. Returns s.

    Args:
        s: the logits (first axis sliced), overwritten.
        mask: boolean (True may attend) or float (added) mask broadcast to s, or None.
    """
    rows = max(1, _SLICE_MAP // max(1, s[0].numel()))
    per_row = mask is not None and mask.ndim == s.ndim and mask.shape[0] > 1
    for i in range(0, s.shape[0], rows):
        part, m = s[i:i + rows].float(), (mask[i:i + rows] if per_row else mask)
        if m is not None:
            part = part.masked_fill_(~m, float("-inf")) if m.dtype == torch.bool else part.add_(m)
        s[i:i + rows] = torch.softmax(part, -1)
    return s


class ShortAttention(torch.autograd.Function):
    """softmax(q k^T * scale + mask) v with the map P held for the backward (Eq. 1 with dropout on P):
    forward S = (q scale) k^T + mask (in float32 where `float_softmax` says so), P = softmax(S) in S's dtype,
    O = D(P) v with D(P) = P * keep / P(keep) (keep drawn by
    `vspec.ops.dropout.keep_mask`);
    backward dV = D(P)^T dO, dP = D'(dO V^T), dS = P * (dP - rowsum(dP * P)), dq = dS k scale, dk = dS^T (q scale),
    dmask = dS summed over its broadcast axes. Any dtype (the tests run it in float64); `sdpa` gives it bf16."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, dropout_p):
        """O = D(softmax((q scale) k^T + mask)) v; P, the keep mask and (q scale), k, v held for the backward."""
        with torch.autocast("cpu", enabled=False):
            # contiguous once (a head's rows are strided in the fused qkv), or every matmul below copies them
            qs, k, v = (q * scale).contiguous(), k.contiguous(), v.contiguous()
            p = _masked_softmax(torch.matmul(qs, k.transpose(-2, -1)), mask)
            keep = None
            if dropout_p > 0:
                keep = keep_mask(p.shape, dropout_p, p.device, p.dtype)  # 1 and 0 in p's dtype: cast once
                out = torch.matmul(p.mul(keep).mul_(1 / keep_probability(dropout_p)), v)
            else:
                out = torch.matmul(p, v)
        ctx.save_for_backward(qs, k, v, p, keep)
        ctx.scale, ctx.dropout_p = scale, dropout_p
        ctx.mask_shape = None if mask is None or mask.dtype == torch.bool else (mask.shape, mask.dtype)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        """dq, dk, dv and the float mask's gradient from dO (the class's equations)."""
        qs, k, v, p, keep = ctx.saved_tensors
        grad = grad.to(v.dtype).contiguous()
        dropped = p if keep is None else p.mul(keep).mul_(1 / keep_probability(ctx.dropout_p))
        dv = torch.matmul(dropped.transpose(-2, -1), grad) if ctx.needs_input_grad[2] else None
        dp = torch.matmul(grad, v.transpose(-2, -1))
        if keep is not None:
            dp = dp.mul_(keep).mul_(1 / keep_probability(ctx.dropout_p))
        ds = torch._softmax_backward_data(dp, p, -1, p.dtype)
        dq = torch.matmul(ds, k).mul_(ctx.scale) if ctx.needs_input_grad[0] else None
        dk = torch.matmul(ds.transpose(-2, -1), qs) if ctx.needs_input_grad[1] else None
        dmask = _reduce_to(ds, *ctx.mask_shape) if ctx.mask_shape and ctx.needs_input_grad[3] else None
        return dq, dk, dv, dmask, None, None


_SLICE_MAP = 2**20  # map elements per slice (inference; the float32 softmax): below glibc's mmap threshold, kept


def _sliceable(q, k, v, mask) -> bool:
    """Whether the output's leading axes are q's (k, v and the mask broadcast into them, over as many axes), so that
    slices of q's first axis make slices of the output."""
    lead = q.shape[:-2]
    if not q.ndim == k.ndim == v.ndim or (mask is not None and mask.ndim > q.ndim):
        return False
    return torch.broadcast_shapes(lead, k.shape[:-2], v.shape[:-2], () if mask is None else mask.shape[:-2]) == lead


def _short_inference(q, k, v, mask, scale, dropout_p) -> torch.Tensor:
    """ShortAttention's forward without autograd, in slices along the first axis, each with a map of about
    _SLICE_MAP elements: a whole map, allocated afresh in every call, is mapped and faulted in each time by glibc."""
    rows = max(1, _SLICE_MAP // max(1, q.shape[1:-1].numel() * k.shape[-2]))
    if rows >= q.shape[0] or not _sliceable(q, k, v, mask):
        return ShortAttention.apply(q, k, v, mask, scale, dropout_p)
    sliced = mask is not None and mask.ndim == q.ndim and mask.shape[0] == q.shape[0] > 1
    k, v = (x.expand(q.shape[0], *x.shape[1:]) for x in (k, v))
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    for i in range(0, q.shape[0], rows):
        part = slice(i, i + rows)
        out[part] = ShortAttention.apply(q[part], k[part], v[part], mask[part] if sliced else mask, scale, dropout_p)
    return out


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
         dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """`F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale=scale)`; ShortAttention where
    `short_path` says so (q, k, v cast to bf16 under autocast, as SDPA would); in half precision on a CPU whose flash
    kernel cannot run, SDPA's math backend, the same equation.

    Args:
        q: the queries (..., N, d).
        k: the keys (..., M, d).
        v: the values (..., M, dv).
        attn_mask: boolean (True may attend) or float (added to the logits) mask broadcast to (..., N, M), or None.
        dropout_p: dropout on the attention probabilities.
        is_causal: whether query i sees keys up to i only.
        scale: the logits' factor; None: d ** -0.5.
    """
    short, mask = _short_mask(q, k, v, attn_mask, is_causal, dropout_p)
    if short:
        q, k, v = (x.to(torch.bfloat16) for x in (q, k, v))
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v, mask) if x is not None):
            return ShortAttention.apply(q, k, v, mask, scale, dropout_p)
        return _short_inference(q, k, v, mask, scale, dropout_p)
    kwargs = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)
    if _FLASH_PACKS_WITHOUT_AVX512 and q.dtype in _HALF and q.device.type == "cpu":
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, **kwargs)
    return F.scaled_dot_product_attention(q, k, v, **kwargs)
