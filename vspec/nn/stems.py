"""The convolutional patch stem (`vspec.spec.ConvStem`: Refined-ViT's and LV-ViT's) and the BatchNorm folding it
shares with Refiner's released DLA.

Speed (where the CPU fast paths run, `ops.fast.enabled`): in eval the stem runs channels-last (oneDNN's
convolutions reorder NCHW inputs) with each BatchNorm (running statistics) folded into its convolution; in
training it runs as written, NCHW (channels-last convolutions and BatchNorms sum less accurately, issue 19). With
the switch off (the profiler) it runs its plain ops, so that every BatchNorm is counted."""

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .. import spec as specs
from ..ops import fast
from .context import BuildContext

__all__ = ["ConvStem", "bn_affine", "on_running_stats"]


def bn_affine(bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, c) with bn(x) = s x + c per channel, from the running statistics (eval).

    Args:
        bn: a BatchNorm in eval mode.
    """
    s = bn.weight * torch.rsqrt(bn.running_var + bn.eps)
    return s, bn.bias - bn.running_mean * s


def on_running_stats(bns) -> bool:
    """Whether every BatchNorm of `bns` normalises with its running statistics (eval mode, statistics tracked): then
    it is the affine map `bn_affine` gives, and a fast path may fold it.

    Args:
        bns: the BatchNorm modules.
    """
    return all(not bn.training and bn.running_mean is not None for bn in bns)


class ConvStem(nn.Module):
    """(conv -> BN -> ReLU) x 3, the first with stride 2, then the patch_size / 2 projection. Names as the released
    stems (Refined-ViT's PatchEmbed_cnn, LV-ViT's PatchEmbed4_2): conv1-3, bn1-3, proj."""

    def __init__(self, spec: specs.ConvStem, ctx: BuildContext):
        super().__init__()
        (w1, w2, w3), p = spec.widths, spec.patch_size // 2
        self.conv1 = nn.Conv2d(ctx.in_chans, w1, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(w1)
        self.conv2 = nn.Conv2d(w1, w2, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(w2)
        self.conv3 = nn.Conv2d(w2, w3, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(w3)
        self.proj = nn.Conv2d(w3, ctx.dim, p, stride=p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> tokens (B, N, dim): the three conv-BN-ReLU, then the projection."""
        layers = ((self.conv1, self.bn1), (self.conv2, self.bn2), (self.conv3, self.bn3))
        if fast.enabled(x) and on_running_stats([bn for _, bn in layers]):
            # eval: channels-last (faster convolutions; the tokens come out without a copy), each
            # BatchNorm folded into its convolution
            x = x.contiguous(memory_format=torch.channels_last)
            for conv, bn in layers:
                s, c = bn_affine(bn)
                x = F.relu(conv._conv_forward(x, conv.weight * s[:, None, None, None], c), inplace=True)
        else:  # training: as written, NCHW (oneDNN's channels-last convolutions sum less accurately)
            for conv, bn in layers:
                x = F.relu(bn(conv(x)))
        return rearrange(self.proj(x), "b d h w -> b (h w) d")
