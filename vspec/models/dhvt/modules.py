"""DHVT's components (Lu et al., DHVT): SOPE, DAFF and head tokens, with the released module names
(`proj`, `pre_affine`, `conv1..3`, `bn1..3`, `compress`, `excitation`)."""

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ...nn.blocks import Block
from ...nn.context import BuildContext
from ...nn.layers import Linear, make_norm
from . import spec as family_spec

__all__ = ["Affine", "DAFF", "HeadTokenBlock", "HeadTokens", "SOPE"]


class Affine(nn.Module):
    """Eq. 1: Diag(alpha) x + beta per channel, alpha = 1 and beta = 0 at init."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.beta = nn.Parameter(torch.zeros(1, channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x * alpha + beta, per channel."""
        return x * self.alpha + self.beta


class SOPE(nn.Module):
    """Eq. 3: Reshape(Aff(G_k(... G_1(Aff(x))))), G_i = 3x3 conv stride 2 + norm (+ GELU, Eq. 2)."""

    def __init__(self, spec: family_spec.SOPE, ctx: BuildContext):
        super().__init__()
        k, d = spec.units, ctx.dim
        self.pre_affine = Affine(ctx.in_chans) if spec.pre_affine else nn.Identity()
        layers, c_in = [], ctx.in_chans
        for i in range(k):
            c_out = d // 2 ** (k - 1 - i)
            conv = nn.Conv2d(c_in, c_out, 3, 2, 1, bias=False)
            layers.append(nn.Sequential(conv, make_norm(spec.norm, c_out, "map")))
            if i < k - 1 or spec.act == "every" or k == 1:  # released: GELU between units; after a lone unit
                layers.append(nn.GELU())
            c_in = c_out
        self.proj = nn.Sequential(*layers)
        self.post_affine = Affine(d) if spec.post_affine else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """An image (B, C, H, W) as tokens (B, N, dim)."""
        return rearrange(self.post_affine(self.proj(self.pre_affine(x))), "b d h w -> b (h w) d")


class DAFF(nn.Module):
    """Eq. 4-5 on the token grid handed down by the build context (ctx.grid)."""

    def __init__(self, spec: family_spec.DAFF, ctx: BuildContext):
        super().__init__()
        d, h, k = ctx.dim, spec.hidden_dim(ctx.dim), spec.kernel
        self.spec, self.grid, self.prefix = spec, ctx.grid, ctx.num_prefix_tokens
        self.conv1 = nn.Conv2d(d, h, 1)
        self.bn1 = make_norm(spec.norm, h, "map")
        if spec.spatial == "dwconv":
            self.conv2 = nn.Conv2d(h, h, k, padding=k // 2, groups=h)
        elif spec.spatial == "avgpool":
            self.conv2 = nn.AvgPool2d(k, 1, k // 2, count_include_pad=False)
        if spec.spatial != "none":
            self.bn2 = make_norm(spec.norm, h, "map")
        self.conv3 = nn.Conv2d(h, d, 1)
        self.bn3 = make_norm(spec.norm, d, "map")
        if spec.cls != "identity":
            self.compress = Linear(d, d // spec.se_reduction)
            self.excitation = Linear(d // spec.se_reduction, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Tokens (B, N, dim) -> (B, N, dim), the patch tokens through the convolutions on their grid."""
        s = self.spec
        cls, tokens = (x[:, :self.prefix], x[:, self.prefix:]) if s.split_cls else (x[:, :0], x)
        gh, gw = self.grid if s.split_cls else (tokens.shape[1], 1)
        g = rearrange(tokens, "b (h w) c -> b c h w", h=gh, w=gw)
        g = F.gelu(self.bn1(self.conv1(g)))
        if s.spatial != "none":
            local = F.gelu(self.bn2(self.conv2(g)))
            g = g + local if s.shortcut else local
        tokens = rearrange(self.bn3(self.conv3(g)), "b c h w -> b (h w) c")
        if s.cls != "identity":  # Eq. 4: W from the mean output patch token, no sigmoid
            w = self.excitation(F.gelu(self.compress(tokens.mean(dim=1, keepdim=True))))
            cls = cls * w  # Eq. 5
            if s.cls == "all":
                tokens = tokens * w
        return torch.cat((cls, tokens), dim=1)


class HeadTokens(nn.Module):
    """Eq. 6-7 around any attention module: X_H = GELU(LN(Linear(Average(Reshape(X))))) + E_head, one head token
    per head of the block's attention (`heads`)."""

    def __init__(self, spec: family_spec.HeadTokens, ctx: BuildContext, heads: int):
        super().__init__()
        self.heads, self.prefix = heads, ctx.num_prefix_tokens
        self.embed = nn.Parameter(torch.zeros(1, heads, ctx.dim))  # E_head
        self.proj = Linear(ctx.dim // heads, ctx.dim)
        self.norm = make_norm(spec.norm, ctx.dim // heads)
        nn.init.trunc_normal_(self.embed, std=0.02)

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, D) -> (B, h, D): per channel group, the mean over all N tokens (class token too)."""
        groups = rearrange(x, "b n (h d) -> b h n d", h=self.heads).mean(dim=2)
        ht = rearrange(self.proj(groups), "b h (g d) -> b h g d", g=self.heads)
        return rearrange(F.gelu(self.norm(ht)), "b h g d -> b h (g d)") + self.embed

    def forward(self, attention: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """`attention` over `x` (B, N, dim) and the head tokens; the tokens back (B, N, dim), the class token
        with the mean head token added."""
        n = x.shape[1]
        y = attention(torch.cat((x, self.tokens(x)), dim=1))  # Eq. 7
        out, ht = y[:, :n], y[:, n:]
        if self.prefix:  # the class token gets the mean head token; the head tokens are dropped
            out = torch.cat((out[:, :1] + ht.mean(dim=1, keepdim=True), out[:, 1:]), dim=1)
        return out


class HeadTokenBlock(Block):
    """The pre-norm block with head tokens around its attention (`vspec.spec.HeadTokenBlock`, Eq. 6-7). The head
    tokens average every token: no mask applies to them."""

    def build_around_attention(self, spec: family_spec.HeadTokenBlock, ctx: BuildContext) -> None:
        """The head tokens around the block's attention."""
        self.head_tokens = HeadTokens(spec.head_tokens, ctx, spec.attention.heads)

    def attend(self, h: torch.Tensor, state: Mapping[str, torch.Tensor], mask: torch.Tensor | None,
               causal: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The attention with head tokens (`HeadTokens`) on `h`; no state written. A mask is a ValueError."""
        if mask is not None or causal:
            raise ValueError("head tokens (DHVT) take the mean over every token: no masks")
        return self.head_tokens(self.attn, h), {}

