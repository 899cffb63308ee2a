"""The generic functions (ViT): a linear layer with the bias and activation fused into the matmul,
and fixed sin-cos position tables.

y = act(x W^T + b), with the bias and the activation fused into the matmul on the CPU.

PyTorch's `F.linear` on a (B, N, C) input first copies the broadcast bias into the output and
then runs the GEMM, and an activation is one more pass over the result. oneDNN's linear takes the
bias and the activation as post-ops of one kernel (the op `torch.ops.mkldnn._linear_pointwise`
that Inductor emits on the CPU). vspec uses it for float32 CPU tensors:
- without autograd (inference): bias and activation fused;
- with autograd: the bias-fused forward inside an autograd.Function whose backward is the plain
  matmuls, the activation left to autograd;
and under bf16 autocast on a CPU with native bf16 matmuls (AMX, AVX-512 BF16): x, W and b cast to bf16 as autocast
would (W once per use: autocast's cast cache is not reachable), the same two ways in bf16; in inference a Parameter W
is cast and reordered into oneDNN's blocked layout once and reused while it is unchanged (`packed`).
Anywhere else (CUDA, meta, other dtypes, autocast, which picks the matmul's dtype (but for bf16 above),
no oneDNN, a CPU without AVX-512 where oneDNN's GEMM loses to MKL's unless the reduction is short (`ONEDNN_WINS`,
`SHORT_K`), JIT tracing as in fvcore, torch.compile, which fuses by itself, the switch off: `fast.enabled`; torch
outside the versions the private op was tested on: `fast.private_op`) it is `act(F.linear(x, w, b))`.
"""

import torch
import torch.nn.functional as F
from torch.utils.weak import WeakTensorKeyDictionary

from . import fast
from .precision import autocast_on, bf16_autocast_on, native_bf16

__all__ = ["ACTIVATIONS", "ONEDNN_WINS", "PACK", "SAMPLES", "SHORT_K", "grouped_linear", "linear", "packed",
           "sincos_1d", "sincos_2d", "structured"]
_MKLDNN = torch.backends.mkldnn.is_available()
_ONEDNN = fast.private_op("mkldnn", "_linear_pointwise") if _MKLDNN else None
_REORDER = fast.private_op("mkldnn", "_reorder_linear_weight") if _MKLDNN else None


def _onednn_wins() -> bool:
    """Whether oneDNN's linear beats F.linear (MKL's GEMM) on this CPU at every size: it does with oneDNN's AVX-512
    kernels. Without AVX-512 (2-core AVX2 EPYC) it lost where the reduction is long (bert_base, K = 768 and 3072:
    forward 0.86x with it, three runs) and was ahead where it is short (deit_tiny, K = 192: forward 1.20x with it), but
    already behind at K = 384 (t2t_vit_14's body: forward 0.92x with it), so there it is taken up to `SHORT_K`
    input features only (medians of 9 alternating rounds, one process)."""
    is_avx512 = getattr(torch.cpu, "_is_avx512_supported", None)  # private: absent, it says no
    return bool(is_avx512 is not None and is_avx512())


_NATIVE_BF16 = native_bf16() is not None
_FLOATS = (torch.float32, torch.bfloat16)
ONEDNN_WINS = _onednn_wins()  # tests set it to exercise the oneDNN path at every size on any CPU
SHORT_K = 256  # input features up to which oneDNN's linear is taken on any CPU

# activation name -> (oneDNN post-op, algorithm, eager function)
ACTIVATIONS = {
    None: ("none", "", None),
    "gelu": ("gelu", "none", F.gelu),
    "gelu_tanh": ("gelu", "tanh", lambda x: F.gelu(x, approximate="tanh")),
    "relu": ("relu", "", F.relu),
    "silu": ("swish", "", F.silu),
    "tanh": ("tanh", "", torch.tanh),
}


def _onednn_ok(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (
        _ONEDNN is not None
        and (ONEDNN_WINS or weight.shape[-1] <= SHORT_K)
        and fast.enabled(x)
        and not autocast_on("cpu")
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and x.ndim >= 2
        and x.numel() > 0
    )


class _BiasFusedLinear(torch.autograd.Function):
    """x W^T + b with oneDNN's bias-fused forward; backward: dx = g W, dW = g^T x, db = sum g."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _ONEDNN(x, weight, bias, "none", [], "")

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        g2 = grad.reshape(-1, grad.shape[-1])
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = grad @ weight
        if ctx.needs_input_grad[1]:
            dw = g2.t() @ x.reshape(-1, x.shape[-1])
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = g2.sum(0)
        return dx, dw, db


def _bf16_ok(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """bf16 autocast on a CPU with native bf16: oneDNN computes every bf16 matmul there anyway (on any vendor), so
    taking its kernel with the bias fused (and in inference the activation) saves their passes; in training also the
    copy of the broadcast bias into the output that addmm makes first."""
    return (
        _ONEDNN is not None
        and _NATIVE_BF16
        and fast.enabled(x)
        and bf16_autocast_on("cpu")
        and x.dtype in _FLOATS
        and weight.dtype in _FLOATS
        and x.ndim >= 2
        and x.numel() > 0
    )


PACK = True  # inference on packed weights (`packed`); benchmarks/packed.py turns it off for its reference
SAMPLES = 16  # evenly spaced values of W compared at each reuse of its packed copy
_PACKED = WeakTensorKeyDictionary()  # Parameter -> (its storage and version when packed, its samples, packed bf16 W)


def packed(weight: torch.Tensor, rows: int) -> torch.Tensor | None:
    """W (out, in) in bf16 and in oneDNN's blocked layout, which its linear otherwise reorders W into at every call
    (Swin-T's and DeiT-Ti's bf16 forward 1.11x as fast packed on an AMD EPYC: benchmarks/packed.py, docs/speed.md,
    "The rest of a bf16 step"; training keeps the per-call cast, its W changing every step). Made once per Parameter
    and reused while it is unchanged: the same storage, version counter (in-place writes, optimiser steps,
    `load_state_dict`) and `SAMPLES` values (writes through `.data`, which the counter does not see). Kept beside the
    Parameter (half its float32 size) until the Parameter is freed or `linear` takes it with autograd (training
    again). None for a tensor that is not a Parameter (a weight computed per call) or is an inference tensor, with
    PACK off or without the op; for inference only: gradients do not flow through it.

    Args:
        weight: the Parameter W.
        rows: the input's rows at the first call (oneDNN's hint; any row count reads the result).
    """
    if not PACK or _REORDER is None or not isinstance(weight, torch.nn.Parameter) or weight.is_inference():
        return None  # an inference tensor (made under inference_mode) has no version counter to watch
    flat = weight.detach().reshape(-1)
    samples = flat[:: max(flat.numel() // SAMPLES, 1)]
    state = (weight.data_ptr(), weight._version, weight.dtype, weight.shape)
    entry = _PACKED.get(weight)
    if entry is None or entry[0] != state or not torch.equal(entry[1], samples):
        entry = (state, samples.clone(), _REORDER(weight.detach().to(torch.bfloat16), rows))
        _PACKED[weight] = entry
    return entry[2]


def _needs_grad(*tensors: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, act: str | None = None
) -> torch.Tensor:
    """act(x W^T + b); `act` is None or a key of ACTIVATIONS.

    Args:
        x: the input (..., in).
        weight: W (out, in).
        bias: b (out,), None for none.
        act: the activation fused after it, a key of ACTIVATIONS (None: none).
    """
    post_op, algorithm, act_fn = ACTIVATIONS[act]
    if _bf16_ok(x, weight):  # what autocast would cast, cast here (differentiably, as autocast does)
        half = torch.bfloat16
        if not _needs_grad(x, weight, bias):
            if (w := packed(weight, x.numel() // x.shape[-1])) is not None:
                return _ONEDNN(x.to(half), w, None if bias is None else bias.to(half), post_op, [], algorithm)
        elif _PACKED:  # training again: an evaluation's packed copy is stale from the next step on, freed now
            _PACKED.pop(weight, None)
        x, weight, bias = x.to(half), weight.to(half), None if bias is None else bias.to(half)
    elif not _onednn_ok(x, weight):
        y = F.linear(x, weight, bias)
        return y if act_fn is None else act_fn(y)
    if not _needs_grad(x, weight, bias):
        return _ONEDNN(x, weight, bias, post_op, [], algorithm)
    y = _BiasFusedLinear.apply(x, weight, bias)
    return y if act_fn is None else act_fn(y)


# ---------------------------------------------------------------- fixed sinusoidal position tables
def _sincos(pos: torch.Tensor, dim: int, temperature: float, denom: int) -> torch.Tensor:
    omega = 1.0 / temperature ** (torch.arange(dim, dtype=torch.float64) / denom)
    angles = pos.to(torch.float64)[:, None] * omega[None, :]
    return angles.sin(), angles.cos()


def sincos_1d(length: int, dim: int, temperature: float = 1e4) -> torch.Tensor:
    """Transformer sinusoids (Vaswani et al. 2017): PE[p, 2i] = sin(p / T^(2i/d)),
    PE[p, 2i+1] = cos(p / T^(2i/d)); shape (length, dim).

    Args:
        length: the positions.
        dim: the table's width.
        temperature: T.
    """
    sin, cos = _sincos(torch.arange(length), dim // 2, temperature, dim // 2)
    return torch.stack((sin, cos), dim=-1).flatten(1).float()


def sincos_2d(h: int, w: int, dim: int, temperature: float = 1e4) -> torch.Tensor:
    """SimpleViT's 2-D table (Beyer et al. 2022), rows in raster order: for each grid cell
    [sin(x w_k), cos(x w_k), sin(y w_k), cos(y w_k)] with w_k = T^(-k / (d/4 - 1)),
    k = 0 .. d/4 - 1; shape (h * w, dim).

    Args:
        h: the grid's rows.
        w: its columns.
        dim: the table's width.
        temperature: T.
    """
    quarter = dim // 4
    y, x = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    xs, xc = _sincos(x.flatten(), quarter, temperature, max(quarter - 1, 1))
    ys, yc = _sincos(y.flatten(), quarter, temperature, max(quarter - 1, 1))
    return torch.cat((xs, xc, ys, yc), dim=1).float()


# ---------------------------------------------------------------- grouped projections (MSF Sec. 2.3)
def grouped_linear(x: torch.Tensor, weight: torch.Tensor, groups: int, grouping: str) -> torch.Tensor:
    """x W_G^T for the grouped weight `weight` (out, in / groups): the input's channels in `groups`
    contiguous groups, each output channel reading one. interleaved: output o reads group o mod G (the
    released code's mode); block: outputs in G contiguous blocks, block j reads group j. One batched
    matmul over the groups (a matmul, which both MAC counters count exactly; fvcore's einsum handle
    does not); `groups` = 1 is a plain linear map.

    Args:
        x: the input (..., in).
        weight: the grouped weight (out, in / groups).
        groups: G, the input's channel groups.
        grouping: "interleaved" or "block" (above).
    """
    if groups == 1:
        return linear(x, weight)
    out, width = weight.shape
    xg = x.reshape(-1, groups, width).transpose(0, 1)  # (G, M, in / G)
    if grouping == "interleaved":  # rows o = j G + g: group g's rows are weight[g::G]
        y = xg @ weight.view(out // groups, groups, width).permute(1, 2, 0)  # (G, M, out / G)
        y = y.permute(1, 2, 0)  # (M, out / G, G): output j G + g
    else:  # rows o = g (out / G) + j
        y = (xg @ weight.view(groups, out // groups, width).transpose(1, 2)).transpose(0, 1)  # (M, G, out / G)
    return y.reshape(*x.shape[:-1], out)


def structured(weight: torch.Tensor, groups: int, grouping: str) -> torch.Tensor:
    """The dense (out, in) matrix of a grouped weight (out, in / groups): zeros where an output channel
    does not read an input group. `grouped_linear(x, w, G, m) == F.linear(x, structured(w, G, m))`.

    Args:
        weight: the grouped weight (out, in / groups).
        groups: G, the input's channel groups.
        grouping: "interleaved" or "block" (`grouped_linear`).
    """
    if groups == 1:
        return weight
    out, width = weight.shape
    o = torch.arange(out, device=weight.device)
    group = o % groups if grouping == "interleaved" else o // (out // groups)
    mask = group[:, None] == torch.arange(groups, device=weight.device).repeat_interleave(width)[None, :]
    return weight.repeat(1, groups) * mask
