"""Classification heads: tokens (B, N, dim) -> logits (B, num_classes)."""

from abc import abstractmethod

import torch
from torch import nn

from .. import spec as S
from .context import BuildContext
from .layers import Linear, make_norm


class _PoolHead(nn.Module):
    """pool -> dropout -> fc; `num_classes = 0` leaves the fc out (features only, as in timm)."""

    def __init__(self, ctx: BuildContext, drop: float):
        super().__init__()
        self.dim = ctx.dim
        self.drop = nn.Dropout(drop) if drop else nn.Identity()
        self.reset(ctx.num_classes)

    def reset(self, num_classes: int) -> list[nn.Module]:
        """A new classifier for `num_classes` (an identity for 0); returns it."""
        self.fc = Linear(self.dim, num_classes) if num_classes > 0 else nn.Identity()
        return [self.fc]

    @abstractmethod
    def pool(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, dim) -> (B, dim)."""

    def forward(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.drop(self.pool(x))
        return x if pre_logits else self.fc(x)


class ClassTokenHead(_PoolHead):
    def __init__(self, spec: S.ClassTokenHead, ctx: BuildContext):
        super().__init__(ctx, spec.drop)

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0]


class GAPHead(_PoolHead):
    def __init__(self, spec: S.GAPHead, ctx: BuildContext):
        super().__init__(ctx, spec.drop)
        self.num_prefix_tokens = ctx.num_prefix_tokens
        self.norm = make_norm(spec.norm, ctx.dim)

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x[:, self.num_prefix_tokens:].mean(dim=1))
