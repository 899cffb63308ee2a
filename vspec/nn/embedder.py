"""Token embedders: (B, C, H, W) -> (B, N, dim)."""

import torch
from einops import rearrange
from torch import nn

from .. import spec as S
from .context import BuildContext
from .layers import Linear, make_norm


class PatchEmbed(nn.Module):
    def __init__(self, spec: S.PatchEmbed, ctx: BuildContext):
        super().__init__()
        p = spec.patch_size
        self.proj = nn.Conv2d(ctx.in_chans, ctx.dim, kernel_size=p, stride=p, bias=spec.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rearrange(self.proj(x), "b d h w -> b (h w) d")


class SimplePatchEmbed(nn.Module):
    def __init__(self, spec: S.SimplePatchEmbed, ctx: BuildContext):
        super().__init__()
        self.p = spec.patch_size
        patch_dim = ctx.in_chans * self.p * self.p
        self.norm_in = make_norm(spec.norm, patch_dim)
        self.proj = Linear(patch_dim, ctx.dim)
        self.norm_out = make_norm(spec.norm, ctx.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = rearrange(x, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=self.p, p2=self.p)
        return self.norm_out(self.proj(self.norm_in(x)))
