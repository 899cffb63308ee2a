"""The toy family's modules: the GLU FFN, the gated block (a subclass of vspec's block: same contract), the traced
block that writes the state "trace", and the head that reads it."""

import torch
import torch.nn.functional as F
from torch import nn

from vspec.nn.blocks import NO_STATE, Block, Carry
from vspec.nn.context import BuildContext
from vspec.nn.layers import Linear

from . import spec as family_spec


class GLUFFN(nn.Module):
    def __init__(self, spec: family_spec.GLUFFN, ctx: BuildContext):
        super().__init__()
        hidden = spec.hidden_dim(ctx.dim)
        self.w = Linear(ctx.dim, hidden)
        self.v = Linear(ctx.dim, hidden)
        self.out = Linear(hidden, ctx.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.w(x) * F.silu(self.v(x)))


class GatedBlock(Block):
    def __init__(self, spec: family_spec.GatedBlock, ctx: BuildContext):
        super().__init__(spec, ctx)
        self.gates = nn.Parameter(torch.full((2,), spec.gate_init))

    def forward(self, x, state=NO_STATE, *, mask=None, causal=False) -> Carry:
        h, wrote = self.attend(self.norm1(x), state, mask, causal)
        x = x + self.drop_path(self.gates[0] * h)
        x = x + self.drop_path(self.gates[1] * self.ffn(self.norm2(x)))
        return self.carry(x, state, wrote)


class TracedBlock(GatedBlock):
    def forward(self, x, state=NO_STATE, *, mask=None, causal=False) -> Carry:
        x, state = super().forward(x, state, mask=mask, causal=causal)
        return self.carry(x, state, {family_spec.TRACE: x[:, 0]})


class TraceHead(nn.Module):
    def __init__(self, spec: family_spec.TraceHead, ctx: BuildContext):
        super().__init__()
        self.dim = ctx.dim
        self.reset(ctx.num_classes)

    def reset(self, num_classes: int) -> list[nn.Module]:
        self.fc = Linear(self.dim, num_classes) if num_classes > 0 else nn.Identity()
        return [self.fc]

    def classifier(self) -> nn.Module:
        return self.fc

    def forward(self, x, pre_logits=False, *, state) -> torch.Tensor:
        x = x[:, 0] + state[family_spec.TRACE]
        return x if pre_logits else self.fc(x)
