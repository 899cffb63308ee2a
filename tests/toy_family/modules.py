"""The toy family's modules: the GLU FFN and the gated block (a subclass of vspec's block: same contract)."""

import torch
import torch.nn.functional as F
from torch import nn

from vspec.nn.context import BuildContext
from vspec.nn.layers import Linear
from vspec.nn.model import Block, Carry

from . import spec as P


class GLUFFN(nn.Module):
    def __init__(self, spec: P.GLUFFN, ctx: BuildContext):
        super().__init__()
        hidden = spec.hidden_dim(ctx.dim)
        self.w = Linear(ctx.dim, hidden)
        self.v = Linear(ctx.dim, hidden)
        self.out = Linear(hidden, ctx.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.w(x) * F.silu(self.v(x)))


class GatedBlock(Block):
    def __init__(self, spec: P.GatedBlock, ctx: BuildContext):
        super().__init__(spec, ctx)
        self.gates = nn.Parameter(torch.full((2,), spec.gate_init))

    def forward(self, x, maps=None, *, mask=None, causal=False, conv=None) -> Carry:
        h, maps = self.attend(self.norm1(x), maps, mask, causal)
        x = x + self.drop_path(self.gates[0] * h)
        x = x + self.drop_path(self.gates[1] * self.ffn(self.norm2(x)))
        return Carry(x, maps if self.hands_on else None, conv)
