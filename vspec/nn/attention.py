"""Token mixers: (B, N, dim) -> (B, N, dim)."""

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .. import spec as S
from .context import BuildContext
from .layers import Linear


class MHSA(nn.Module):
    """softmax(q k^T * scale) v per head, through F.scaled_dot_product_attention."""

    def __init__(self, spec: S.MHSA, ctx: BuildContext):
        super().__init__()
        self.heads = spec.heads
        inner = spec.inner_dim(ctx.dim)
        self.scale = spec.scale  # None: SDPA's default head_dim ** -0.5
        self.attn_drop = spec.attn_drop
        self.qkv = Linear(ctx.dim, 3 * inner, bias=spec.qkv_bias)
        self.proj = Linear(inner, ctx.dim, bias=spec.proj_bias)
        self.proj_drop = nn.Dropout(spec.proj_drop) if spec.proj_drop else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = rearrange(self.qkv(x), "b n (three h d) -> three b h n d", three=3, h=self.heads)
        drop = self.attn_drop if self.training else 0.0
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, scale=self.scale)
        return self.proj_drop(self.proj(rearrange(x, "b h n d -> b n (h d)")))
