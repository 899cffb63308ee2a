"""The losses of a run: timm's (cross-entropy, label smoothing, mixup / cutmix's soft targets) as the recipe asks,
and a regression's (STS-B). (Token labels' soft cross-entropy: vspec/nn/token_losses.py.)"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..extras import needs

__all__ = ["RegressionLoss", "make_criterion"]


def make_criterion(recipe, num_classes: int):
    """(mixup / cutmix or None, the loss): timm's, as the recipe asks.

    Args:
        recipe: the run's Recipe (mixup, cutmix, label smoothing).
        num_classes: the classes of the head."""
    with needs("vspec's training"):
        from timm.data import Mixup  # extra
        from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy  # extra

    if recipe.mixup > 0 or recipe.cutmix > 0:
        mixup = Mixup(mixup_alpha=recipe.mixup, cutmix_alpha=recipe.cutmix, label_smoothing=recipe.smoothing,
                      num_classes=num_classes)
        return mixup, SoftTargetCrossEntropy()
    if recipe.smoothing > 0:
        return None, LabelSmoothingCrossEntropy(smoothing=recipe.smoothing)
    return None, nn.CrossEntropyLoss()


class RegressionLoss(nn.Module):
    """MSE between the single output and the target score (STS-B)."""

    def forward(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The mean squared error, in float32.

        Args:
            out: the model's output (N, 1).
            target: the scores (N,)."""
        return F.mse_loss(out.squeeze(-1).float(), target)
