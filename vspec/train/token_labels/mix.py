"""Mixup / CutMix for token labeling (issue 46): a batch of images and its label maps (B, 3, k, Hm, Wm) (from
`TokenLabels`) -> mixed images and the token-labeling targets (B, C, 2 + S²) of `relabel_target`.

The release's `RelabelMixup` (tensor batch) and `FastCollateRelabelMixup` (uint8 collate), as the fixtures'
README describes them ("Mixup / CutMix"): batch mode only, numpy's global generator drawn in the release's order,
sample b mixed with sample B − 1 − b, and one lam (after CutMix's box correction) for every target column, the
token targets included (CutMix does not make them box-aware).
"""

from __future__ import annotations

import numpy as np
import torch

from ..validators import ConfigError
from .maps import relabel_target

__all__ = ["RelabelMix"]


class RelabelMix:
    """(images (B, C, H, W), label maps (B, 3, k, Hm, Wm)) -> (mixed images, targets (B, num_classes, 2 + S²);
    (B, num_classes, 2) for label_size 1). Float images mix as `x·lam + x.flip(0)·(1 − lam)` (the tensor path);
    uint8 images as the release's collate does: rint of that sum in float32, cast back to uint8. CutMix copies
    the partner's box into the image in both. With mixup and cutmix off (alphas 0) or `prob` 0 nothing is drawn
    and the targets are those of lam 1. Draws from numpy's global generator: in the training process that is a
    stream `vspec train` seeds every epoch and saves in its checkpoints. `check`: relabel_target's (False: the maps
    were checked as they were read, `TokenLabels`)."""

    def __init__(self, num_classes: int, *, mixup_alpha: float = 0.8, cutmix_alpha: float = 1.0,
                 prob: float = 1.0, switch_prob: float = 0.5, mode: str = "batch", smoothing: float = 0.1,
                 label_size: int = 14, released_alignment: bool = False, check: bool = True):
        if mode != "batch":
            raise ConfigError("mixup mode", f"{mode!r} draws a lam per sample, which the token targets "
                              f"cannot take (the release fails on it too); use mode 'batch'")
        if min(mixup_alpha, cutmix_alpha) < 0 or not (0 <= prob <= 1 and 0 <= switch_prob <= 1):
            raise ConfigError("token-labeling mixup", f"alphas must be >= 0 and probabilities in [0, 1], got mixup "
                              f"{mixup_alpha}, cutmix {cutmix_alpha}, prob {prob}, switch_prob {switch_prob}")
        self.num_classes, self.mixup_alpha, self.cutmix_alpha = num_classes, mixup_alpha, cutmix_alpha
        self.prob, self.switch_prob, self.smoothing = prob, switch_prob, smoothing
        self.label_size, self.released_alignment, self.check = label_size, released_alignment, check

    def draw(self, height: int, width: int) -> tuple[float, tuple[int, int, int, int] | None]:
        """(lam, CutMix box (row lo, row hi, col lo, col hi) or None), numpy's global generator in the release's
        order: rand() < prob, then rand() < switch_prob (both alphas on), the Beta draw, the box centre row then
        column; with a box, lam is 1 − box area / (H·W).

        Args:
            height: the images' height.
            width: their width."""
        if not (self.mixup_alpha > 0 or self.cutmix_alpha > 0) or not np.random.rand() < self.prob:
            return 1.0, None
        if self.mixup_alpha > 0 and self.cutmix_alpha > 0:
            cutmix = np.random.rand() < self.switch_prob
        else:
            cutmix = self.cutmix_alpha > 0
        alpha = self.cutmix_alpha if cutmix else self.mixup_alpha
        lam = float(np.random.beta(alpha, alpha))
        if not cutmix:
            return lam, None
        cut = np.sqrt(1 - lam)
        cut_h, cut_w = int(height * cut), int(width * cut)
        cy, cx = np.random.randint(0, height), np.random.randint(0, width)
        box = (int(np.clip(cy - cut_h // 2, 0, height)), int(np.clip(cy + cut_h // 2, 0, height)),
               int(np.clip(cx - cut_w // 2, 0, width)), int(np.clip(cx + cut_w // 2, 0, width)))
        return 1.0 - (box[1] - box[0]) * (box[3] - box[2]) / float(height * width), box

    def mix_images(self, images: torch.Tensor, lam: float, box) -> torch.Tensor:
        """The mixed batch (a new tensor): the partner's box pasted in, or the lam blend (rounded for uint8).

        Args:
            images: the batch (B, C, H, W); each is mixed with the batch flipped (its partner).
            lam: `draw`'s lam.
            box: `draw`'s box, or None (a blend)."""
        if box is not None:
            r0, r1, c0, c1 = box
            out = images.clone()
            out[:, :, r0:r1, c0:c1] = images.flip(0)[:, :, r0:r1, c0:c1]
            return out
        if lam == 1.0:
            return images
        if images.dtype == torch.uint8:  # the collate's path: float32 sum, rint, back to uint8
            mixed = images.float() * lam + images.flip(0).float() * (1.0 - lam)
            return mixed.round_().to(torch.uint8)
        return images * lam + images.flip(0) * (1.0 - lam)

    def __call__(self, images: torch.Tensor, label_maps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if images.dim() != 4 or label_maps.dim() != 5 or len(images) != len(label_maps):
            raise ValueError(f"token-labeling mixup wants images (B, C, H, W) and label maps (B, 3, k, Hm, Wm), got "
                             f"{tuple(images.shape)} and {tuple(label_maps.shape)}")
        lam, box = self.draw(*images.shape[-2:])
        target = relabel_target(label_maps, self.num_classes, lam=lam, smoothing=self.smoothing,
                                label_size=self.label_size, released_alignment=self.released_alignment,
                                check=self.check)
        return self.mix_images(images, lam, box), target
