"""The transformer block."""

import torch
from torch import nn

from .. import spec as S
from .context import BuildContext
from .dhvt import HeadTokens
from .layers import DropPath, LayerScale, make_norm, maybe


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm1(x)), then x + ffn(norm2(x)), each branch with
    optional layer scale and drop path; with head tokens, attn runs inside HeadTokens."""

    def __init__(self, spec: S.Block, ctx: BuildContext):
        super().__init__()
        d = ctx.dim
        self.norm1 = make_norm(spec.norm, d)
        self.attn = ctx.child(spec.attention)
        self.head_tokens = (HeadTokens(spec.head_tokens, ctx, spec.attention.heads)
                            if spec.head_tokens is not None else None)
        self.ls1 = maybe(LayerScale, spec.layer_scale is not None, d, spec.layer_scale)
        self.norm2 = make_norm(spec.norm, d)
        self.ffn = ctx.child(spec.ffn)
        self.ls2 = maybe(LayerScale, spec.layer_scale is not None, d, spec.layer_scale)
        self.drop_path = maybe(DropPath, ctx.drop_path > 0, ctx.drop_path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        h = self.attn(h) if self.head_tokens is None else self.head_tokens(self.attn, h)
        x = x + self.drop_path(self.ls1(h))
        return x + self.drop_path(self.ls2(self.ffn(self.norm2(x))))
