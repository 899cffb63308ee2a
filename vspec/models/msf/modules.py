"""MSF's module: mean-shift attention (Eq. 12, Eq. 14, Gauss-Orig), projections from RoleProjections
(tying and grouping, layers.py)."""

import torch
from einops import rearrange
from torch import nn

from ...nn.context import BuildContext
from ...nn.layers import AttentionCore, ProjectedAttention, sdpa_masks
from ...nn.swin import BiasedAttentionCore, WindowMHSA
from ...ops.dropout import Dropout
from . import spec as family_spec
from .ops import gaussian_attention, gaussian_channels

__all__ = ["GaussianAttentionCore", "GaussianBiasedCore", "MeanShiftAttention", "MeanShiftOutput",
           "WindowMeanShiftAttention"]


class GaussianAttentionCore(AttentionCore):
    """softmax_i((q.k_i - 1/2 |k_i|^2) * scale + mask) v, the Gaussian kernel, through the fused dot-product
    kernel (vspec.models.msf.ops.gaussian_attention); dropout on the attention in training. `mask` / `causal`:
    SDPA's."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                causal: bool = False) -> torch.Tensor:
        """The Gaussian-kernel attention of q, k, v (B, H, N, d), dropout in training."""
        return gaussian_attention(q, k, v, self.scale, self.drop if self.training else 0.0, mask, causal)

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """q.k_i - 1/2 |k_i|^2 (Eq. 12's Gaussian kernel, up to a per-query constant)."""
        return q @ k.transpose(-2, -1) - 0.5 * k.square().sum(-1).unsqueeze(-2)


class GaussianBiasedCore(BiasedAttentionCore):
    """softmax_i((q.k_i - 1/2 |k_i|^2) * scale + mask_i) v: the Gaussian kernel plus Swin's float mask
    (relative position bias, shift mask), the per-key bias in the extra channel (gaussian_channels).
    `scale` must be given: the default would read the widened q."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The Gaussian-kernel attention of q, k, v (B, H, N, d) with Swin's float `mask`."""
        return super().forward(*gaussian_channels(q, k, v), mask)[..., :v.shape[-1]]

    scores = GaussianAttentionCore.scores


class MeanShiftOutput:
    """Eq. 12 / Eq. 14 around the output projection (ProjectedAttention.finish)."""

    def finish(self, z: torch.Tensor, probe: list[torch.Tensor]) -> torch.Tensor:
        """The output projection of z, the probe's term (`probe[0]`) taken off before it (eq12) or
        after (eq14)."""
        if self.form == "eq12":
            z = z - probe[0]
        out = self.output(z)
        return out - probe[0] if self.form == "eq14" else out


class MeanShiftAttention(MeanShiftOutput, ProjectedAttention):
    """Eq. 12: W [concat_h (sum_i a_i v_i) - p] with p = P^T x; eq14: W concat_h (sum_i a_i v_i) - P~ x;
    gauss_orig: W concat_h (sum_i a_i v_i); a the Gaussian attention of q, k per head. The released
    code's MSF attention (vit_pytorch/simple_vit_flexatt.py, att = "msf") is eq12 without biases."""

    def __init__(self, spec: family_spec.MeanShiftAttention, ctx: BuildContext):
        super().__init__()
        self.heads, self.form = spec.heads, spec.form
        self.init_projections(spec, ctx.dim, spec.inner_dim(ctx.dim))
        self.core = GaussianAttentionCore(spec.attn_drop, spec.scale)
        self.proj_drop = Dropout(spec.proj_drop) if spec.proj_drop else nn.Identity()

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        """`mask` (B, N): True at real tokens; `causal`: token i attends to tokens <= i (Block's contract)."""
        q, k, v, *probe = self.project(x)
        q, k, v = (rearrange(y, "b n (h d) -> b h n d", h=self.heads) for y in (q, k, v))
        z = rearrange(self.core(q, k, v, *sdpa_masks(mask, causal, x.shape[1])), "b h n d -> b n (h d)")
        return self.proj_drop(self.finish(z, probe))


class WindowMeanShiftAttention(MeanShiftOutput, WindowMHSA):
    """Swin's (shifted) window attention with the Gaussian kernel and the probe (Eq. 12 / 14 per window):
    WindowMHSA's windows, shift and relative position bias, MeanShiftAttention's projections and form."""

    def __init__(self, spec: family_spec.WindowMeanShiftAttention, ctx: BuildContext):
        super().__init__(spec, ctx)
        self.form = spec.form
        scale = spec.scale if spec.scale is not None else (spec.inner_dim(ctx.dim) // spec.heads) ** -0.5
        self.core = GaussianBiasedCore(spec.attn_drop, scale)
