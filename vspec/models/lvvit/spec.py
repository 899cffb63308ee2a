"""LV-ViT (Jiang et al., "All tokens matter: token labeling for training better vision transformers"): its block,
whose residual branches are re-scaled. Its patch stem is the core's `vspec.spec.ConvStem` (width 64 or 128,
growth 1), its head the core's class-token head with the dense auxiliary head (`vspec.spec.DenseAux`)."""

from typing import ClassVar

from attrs import field, frozen

from ...spec.blocks import Block
from ...spec.errors import check

__all__ = ["RescaledBlock"]


@frozen
class RescaledBlock(Block):
    """LV-ViT's pre-norm block with re-scaled residual branches (the paper's "re-scaling residual connection"; the
    released `skip_lam`): x + attn(norm(x)) / skip_lam, then x + ffn(norm(x)) / skip_lam. Only the branch is
    divided, the skip path is not (2 in LV-ViT-S / M, 3 in LV-ViT-L, 1 in LV-ViT-T: the plain pre-norm block)."""

    kind: ClassVar[str] = "rescaled"
    skip_lam: float = field(default=2.0, validator=check(float, gt=0))
