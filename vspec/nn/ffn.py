"""Channel mixers: (B, N, dim) -> (B, N, dim)."""

import torch
from torch import nn

from .. import spec as S
from .context import BuildContext
from .layers import ACTIVATIONS


class MLP(nn.Module):
    def __init__(self, spec: S.MLP, ctx: BuildContext):
        super().__init__()
        hidden = spec.hidden_dim(ctx.dim)
        self.fc1 = nn.Linear(ctx.dim, hidden, bias=spec.bias)
        self.act = ACTIVATIONS[spec.act]()
        self.fc2 = nn.Linear(hidden, ctx.dim, bias=spec.bias)
        self.drop = nn.Dropout(spec.drop) if spec.drop else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))
