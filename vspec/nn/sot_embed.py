"""SoT's convolutional token embedding (supplement A), with the released code's module names
(`stem`, `stage`, `transition`) so that released checkpoints map by prefix.

stem: 3x3 conv (bias) + 3x3 max-pool stride 2 -> three blocks, each halving the resolution ->
1x1 conv (bias) to the token width. Block kinds and their released configurations:
- dense: dense block of 6 layers (BN-ReLU-1x1 conv to 32, BN-ReLU-3x3 conv to 16, growth 16), then a
  transition BN - 1x1 conv to 128 - 2x2 avg-pool (no ReLU), convs without bias;
- resnet: bottleneck (planes 64, expansion 4, stride 2 on the 3x3 conv), BN eps 1e-3 in the main
  path and 1e-5 in the projection shortcut;
- inception: branches 1x1 -> 32 | 1x1 -> 32, 3x3 -> 64 | 1x1 -> 16, 5x5 -> 16 | 3x3 max-pool,
  1x1 -> 16, each conv without bias + BN (eps 1e-3) + ReLU, stride 2 on each branch's last layer;
- nonlocal: not in the released code and its figure (S-1) is not in our copy of the paper; vspec's
  construction: 3x3 conv stride 2 to 128 + BN + ReLU, then an embedded-Gaussian non-local block
  (Wang et al. 2018: theta / phi / g 1x1 convs to 64, softmax(theta^T phi) g, 1x1 conv back + BN,
  residual).
"""

from collections import OrderedDict

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .. import spec as S
from .context import BuildContext


def conv_bn_relu(c_in: int, c_out: int, k: int, stride: int = 1, eps: float = 1e-3) -> nn.Sequential:
    """conv (no bias) + BN + ReLU, named `conv` / `bn` as in the released Inception blocks."""
    return nn.Sequential(OrderedDict(conv=nn.Conv2d(c_in, c_out, k, stride, k // 2, bias=False),
                              bn=nn.BatchNorm2d(c_out, eps=eps), relu=nn.ReLU(inplace=True)))


class DenseLayer(nn.Module):
    def __init__(self, c_in: int, growth: int = 16, bottleneck: int = 32):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(c_in)
        self.conv1 = nn.Conv2d(c_in, bottleneck, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bottleneck)
        self.conv2 = nn.Conv2d(bottleneck, growth, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.relu(self.norm1(x)))
        return torch.cat((x, self.conv2(F.relu(self.norm2(h)))), dim=1)


class DenseBlock(nn.Sequential):
    def __init__(self, c_in: int, layers: int = 6, growth: int = 16):
        super().__init__()
        for i in range(layers):
            self.add_module(f"denselayer{i + 1}", DenseLayer(c_in + i * growth, growth))


class Transition(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, downsample: bool):
        super().__init__()
        self.norm = nn.BatchNorm2d(c_in)
        self.conv = nn.Conv2d(c_in, c_out, 1, bias=False)
        self.pool = nn.AvgPool2d(2) if downsample else nn.Identity()


class Bottleneck(nn.Module):
    def __init__(self, c_in: int, planes: int = 64, stride: int = 2, expansion: int = 4):
        super().__init__()
        out = planes * expansion
        self.conv1 = nn.Conv2d(c_in, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes, eps=1e-3, momentum=0.01)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes, eps=1e-3, momentum=0.01)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out, eps=1e-3, momentum=0.01)
        self.downsample = nn.Sequential(nn.Conv2d(c_in, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return F.relu(self.bn3(self.conv3(h)) + self.downsample(x))


class InceptionBlock(nn.Module):
    def __init__(self, c_in: int, stride: int = 2):
        super().__init__()
        self.branch0 = conv_bn_relu(c_in, 32, 1, stride)
        self.branch1 = nn.Sequential(conv_bn_relu(c_in, 32, 1), conv_bn_relu(32, 64, 3, stride))
        self.branch2 = nn.Sequential(conv_bn_relu(c_in, 16, 1), conv_bn_relu(16, 16, 5, stride))
        self.branch3 = nn.Sequential(nn.MaxPool2d(3, stride, 1), conv_bn_relu(c_in, 16, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch0(x), self.branch1(x), self.branch2(x), self.branch3(x)], dim=1)


class NonLocalBlock(nn.Module):
    """Strided 3x3 conv + BN + ReLU, then y = x + BN(W softmax(theta(x)^T phi(x)) g(x))."""

    def __init__(self, c_in: int, c_out: int = 128, stride: int = 2):
        super().__init__()
        inner = c_out // 2
        self.down = conv_bn_relu(c_in, c_out, 3, stride, eps=1e-5)
        self.theta = nn.Conv2d(c_out, inner, 1)
        self.phi = nn.Conv2d(c_out, inner, 1)
        self.g = nn.Conv2d(c_out, inner, 1)
        self.out = nn.Sequential(nn.Conv2d(inner, c_out, 1), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.down(x)
        h, w = x.shape[-2:]
        q, k, v = (rearrange(f(x), "b c h w -> b (h w) c") for f in (self.theta, self.phi, self.g))
        y = F.scaled_dot_product_attention(q, k, v, scale=1.0)  # softmax(theta^T phi) g, unscaled
        return x + self.out(rearrange(y, "b (h w) c -> b c h w", h=h, w=w))


def _stage(block: str, c_in: int, downsample_last: bool) -> tuple[nn.Sequential, int]:
    """The three resolution-halving blocks and their output channels."""
    strides = [2, 2, 2 if downsample_last else 1]
    if block == "dense":
        mods, c = [], c_in
        for s in strides:
            mods += [DenseBlock(c), Transition(c + 6 * 16, 128, downsample=s == 2)]
            c = 128
        return nn.Sequential(*mods), 128
    if block == "resnet":
        return nn.Sequential(*(Bottleneck(c_in if i == 0 else 256, stride=s) for i, s in enumerate(strides))), 256
    if block == "inception":
        return nn.Sequential(*(InceptionBlock(c_in if i == 0 else 128, s) for i, s in enumerate(strides))), 128
    return nn.Sequential(*(NonLocalBlock(c_in if i == 0 else 128, 128, s) for i, s in enumerate(strides))), 128


class SoTEmbed(nn.Module):
    def __init__(self, spec: S.SoTEmbed, ctx: BuildContext):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(ctx.in_chans, spec.stem_dim, 3, padding=1), nn.MaxPool2d(3, 2, 1))
        self.stage, c = _stage(spec.block, spec.stem_dim, spec.downsample_last)
        self.transition = nn.Conv2d(c, ctx.dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rearrange(self.transition(self.stage(self.stem(x))), "b d h w -> b (h w) d")
