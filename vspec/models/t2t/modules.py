"""T2T-ViT's tokens-to-token module (spec: `vspec.spec.T2TEmbed`): soft splits and token blocks, image -> tokens."""

import torch
from einops import rearrange
from torch import nn

from ... import spec as specs
from ...nn.context import BuildContext
from ...nn.layers import AttentionCore, Linear
from ...ops.dropout import Dropout
from . import spec as family_spec
from .ops import performer_attention, random_features, soft_split
from .spec import SOFT_SPLITS

__all__ = ["T2TEmbed", "T2T_EPS", "TokenBlock"]

T2T_EPS = 1e-5  # every LayerNorm of the released T2T module (torch's default)


class TokenBlock(nn.Module):
    """One token block (Eq. 1) from tokens `in_dim` wide to `token_dim` wide: T' = v + proj(attention(LN(T))), the
    residual through v (the input is wider than the output), then T' + MLP(LN(T')). Performer: `kqv` (released
    order k, q, v) and the fixed random features `w` (a buffer: loaded, never trained); transformer: `qkv` (no
    bias) and softmax attention at scale in_dim^-0.5."""

    def __init__(self, spec: family_spec.T2TEmbed, ctx: BuildContext, in_dim: int):
        super().__init__()
        dim, self.performer = spec.token_dim, spec.block == "performer"
        self.norm1 = nn.LayerNorm(in_dim, eps=T2T_EPS)
        if self.performer:
            self.kqv = Linear(in_dim, 3 * dim)
            self.register_buffer("w", random_features(spec.features, dim))
        else:
            self.qkv = Linear(in_dim, 3 * dim, bias=False)
            self.core = AttentionCore(scale=in_dim**-0.5)
        self.proj = Linear(dim, dim)
        drop = spec.drop if self.performer else 0.0
        self.drop = Dropout(drop) if drop else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=T2T_EPS)
        self.mlp = ctx.child(specs.MLP(ratio=1.0, drop=drop, hidden_drop=0.0), tokens=specs.Tokens(dim, ctx.grid))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Tokens (B, L, in_dim) -> (B, L, token_dim)."""
        h = self.norm1(x)
        if self.performer:
            k, q, v = self.kqv(h).chunk(3, dim=-1)
            y = performer_attention(q, k, v, self.w).to(v.dtype)
        else:
            q, k, v = self.qkv(h).chunk(3, dim=-1)
            y = self.core(q[:, None], k[:, None], v[:, None])[:, 0]  # one head
        x = v + self.drop(self.proj(y))
        return x + self.mlp(self.norm2(x))


class T2TEmbed(nn.Module):
    """Soft split -> [token block -> restructurize (Eq. 2) -> soft split] x 2 -> Linear to the width (Sec. 3.1)."""

    def __init__(self, spec: family_spec.T2TEmbed, ctx: BuildContext):
        super().__init__()
        widths = spec.widths(ctx.in_chans)
        self.blocks = nn.ModuleList(TokenBlock(spec, ctx, w) for w in widths[:2])
        self.project = Linear(widths[2], ctx.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """An image (B, C, H, W) as tokens (B, N, dim)."""
        x, h = self.split(x, 0)
        for i, block in enumerate(self.blocks, 1):
            x, h = self.split(rearrange(block(x), "b (h w) c -> b c h w", h=h), i)  # Eq. 2, then Eq. 3
        return self.project(x)

    @staticmethod
    def split(x: torch.Tensor, i: int) -> tuple[torch.Tensor, int]:
        """Soft split `i` of a (B, C, H, W) map: its tokens and the height of their grid."""
        k, stride, pad = SOFT_SPLITS[i]
        return soft_split(x, k, stride, pad), (x.shape[-2] + 2 * pad - k) // stride + 1
