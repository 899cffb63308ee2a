"""MSF's module: mean-shift attention (Eq. 12, Eq. 14, Gauss-Orig), projections from RoleProjections
(tying and grouping, layers.py)."""

import torch
from einops import rearrange
from torch import nn

from .. import spec as S
from ..ops import gaussian_attention
from .context import BuildContext
from .layers import AttentionCore, ProjectedAttention


class GaussianAttentionCore(AttentionCore):
    """softmax_i((q.k_i - 1/2 |k_i|^2) * scale) v, the Gaussian kernel, through the fused dot-product
    kernel (vspec.ops.gaussian_attention); dropout on the attention in training."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: None = None) -> torch.Tensor:
        return gaussian_attention(q, k, v, self.scale, self.drop if self.training else 0.0)


class MeanShiftAttention(ProjectedAttention):
    """Eq. 12: W [concat_h (sum_i a_i v_i) - p] with p = P^T x; eq14: W concat_h (sum_i a_i v_i) - P~ x;
    gauss_orig: W concat_h (sum_i a_i v_i); a the Gaussian attention of q, k per head. The released
    code's MSF attention (vit_pytorch/simple_vit_flexatt.py, att = "msf") is eq12 without biases."""

    def __init__(self, spec: S.MeanShiftAttention, ctx: BuildContext):
        super().__init__()
        self.heads, self.form = spec.heads, spec.form
        inner = spec.inner_dim(ctx.dim)
        probe = ctx.dim if spec.form == "eq14" else None
        self.init_projections(spec, ctx.dim, inner, probe)
        self.core = GaussianAttentionCore(spec.attn_drop, spec.scale)
        self.proj_drop = nn.Dropout(spec.proj_drop) if spec.proj_drop else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v, *probe = self.project(x)
        q, k, v = (rearrange(y, "b n (h d) -> b h n d", h=self.heads) for y in (q, k, v))
        z = rearrange(self.core(q, k, v), "b h n d -> b n (h d)")
        if self.form == "eq12":
            z = z - probe[0]
        out = self.output(z)
        if self.form == "eq14":
            out = out - probe[0]
        return self.proj_drop(out)
