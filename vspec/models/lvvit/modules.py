"""LV-ViT's module: the pre-norm block with re-scaled residual branches."""

from collections.abc import Mapping

import torch

from ...nn.blocks import NO_STATE, Block, Carry
from ...nn.context import BuildContext
from . import spec as family_spec

__all__ = ["RescaledBlock"]


class RescaledBlock(Block):
    """LV-ViT's block (`vspec.spec.RescaledBlock`): x + attn(norm1(x)) / skip_lam, then
    x + ffn(norm2(x)) / skip_lam (the released Block's order: drop path, then the division)."""

    def __init__(self, spec: family_spec.RescaledBlock, ctx: BuildContext):
        super().__init__(spec, ctx)
        self.skip_lam = spec.skip_lam

    def forward(self, x: torch.Tensor, state: Mapping[str, torch.Tensor] = NO_STATE, *,
                mask: torch.Tensor | None = None, causal: bool = False) -> Carry:
        """The block on tokens `x` (B, N, dim); a Carry of the new tokens and the state
        (`Block.carry`)."""
        h, wrote = self.attend(self.norm1(x), state, mask, causal)
        x = x + self.drop_path(self.ls1(h)) / self.skip_lam
        x = x + self.drop_path(self.ls2(self.ffn(self.norm2(x)))) / self.skip_lam
        return self.carry(x, state, wrote)
