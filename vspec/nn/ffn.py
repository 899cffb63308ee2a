"""Channel mixers: (B, N, dim) -> (B, N, dim)."""

import torch
from torch import nn

from .. import spec as S
from .context import BuildContext
from .layers import Linear


class MLP(nn.Module):
    def __init__(self, spec: S.MLP, ctx: BuildContext):
        super().__init__()
        hidden = spec.hidden_dim(ctx.dim)
        self.fc1 = Linear(ctx.dim, hidden, bias=spec.bias, act=spec.act)  # act(fc1(x)), fused
        self.fc2 = Linear(hidden, ctx.dim, bias=spec.bias)
        self.drop = nn.Dropout(spec.drop) if spec.drop else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(self.fc1(x))))
