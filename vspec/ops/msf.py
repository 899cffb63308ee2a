"""MSF's functions (Kobayashi, "Mean-shift feature transformer"): Gaussian-kernel attention through the
fused dot-product kernel (footnote 2), and grouped projections (Sec. 2.3)."""

import torch
import torch.nn.functional as F

from .vit import linear


def gaussian_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
                       dropout_p: float = 0.0) -> torch.Tensor:
    """sum_i softmax_i((q.k_i - 1/2 |k_i|^2) * scale) v_i over the last two axes (..., N, d), scale
    defaulting to d ** -0.5: the Gaussian kernel softmax_i(-1/2 |k_i - q|^2 * scale), since the
    |q|^2 term is one per query (footnote 2).

    The per-key bias -1/2 |k_i|^2 rides in one extra channel, q' = [q, -1/2], k' = [k, |k|^2], so that
    q'.k' = q.k - 1/2 |k|^2 and the whole of it is one F.scaled_dot_product_attention without a mask:
    the fused (flash) kernels run forward and backward, no n x n map is held, and autograd takes the
    bias's gradient through |k|^2. v gets a zero channel (the CPU flash kernel wants equal widths),
    dropped from the output. A float mask of -1/2 |k|^2 would be the same softmax, but a mask that needs
    a gradient sends SDPA to its math fallback (the n x n map, held for backward): benchmarks/msf.py
    measures both. On CUDA the width is padded to a multiple of 8, as its fused kernels want."""
    q2, k2, v2 = gaussian_channels(q, k, v)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return F.scaled_dot_product_attention(q2, k2, v2, dropout_p=dropout_p, scale=scale)[..., :v.shape[-1]]


def gaussian_channels(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """q' = [q, -1/2], k' = [k, |k|^2], v' = [v, 0] (padded with zeros to a multiple of 8 on CUDA):
    q'.k' = q.k - 1/2 |k|^2, and the attention of q', k', v' is that of the Gaussian kernel in its
    first v.shape[-1] channels (pass the scale of the original width)."""
    pad = (-(q.shape[-1] + 1)) % 8 if q.is_cuda else 0
    zeros = [q.new_zeros((*q.shape[:-1], pad))] if pad else []
    q2 = torch.cat([q, q.new_full((*q.shape[:-1], 1), -0.5), *zeros], dim=-1)  # one copy each
    k2 = torch.cat([k, k.square().sum(-1, keepdim=True), *zeros], dim=-1)
    return q2, k2, F.pad(v, (0, q2.shape[-1] - v.shape[-1]))


def grouped_linear(x: torch.Tensor, weight: torch.Tensor, groups: int, grouping: str) -> torch.Tensor:
    """x W_G^T for the grouped weight `weight` (out, in / groups): the input's channels in `groups`
    contiguous groups, each output channel reading one. interleaved: output o reads group o mod G (the
    released code's mode); block: outputs in G contiguous blocks, block j reads group j. One batched
    matmul over the groups (a matmul, which both MAC counters count exactly; fvcore's einsum handle
    does not); `groups` = 1 is a plain linear map."""
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
    does not read an input group. `grouped_linear(x, w, G, m) == F.linear(x, structured(w, G, m))`."""
    if groups == 1:
        return weight
    out, width = weight.shape
    o = torch.arange(out, device=weight.device)
    group = o % groups if grouping == "interleaved" else o // (out // groups)
    mask = group[:, None] == torch.arange(groups, device=weight.device).repeat_interleave(width)[None, :]
    return weight.repeat(1, groups) * mask
