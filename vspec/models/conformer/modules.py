"""Conformer's modules (Peng et al., ICCV 2021): the stem that yields a CNN map and tokens, a block's CNN side
with its feature-coupling units (FCUDown, FCUUp), the coupled block, and the two-classifier head. How blocks carry
the map: the block contract, `vspec.nn.blocks.Block` (Carry(x, state), the map at state["conv"])."""

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ...nn.blocks import Block, Carry
from ...nn.context import BuildContext
from ...nn.head_outputs import HeadOutput
from ...nn.layers import Linear
from ...spec.kinds import LOGITS
from . import spec as family_spec

__all__ = ["Bottleneck", "ConformerHead", "ConformerStem", "ConvBranch", "CoupledBlock", "FCUDown", "FCUUp"]


def _kaiming(module: nn.Module) -> nn.Module:
    """Conformer's conv init (fan_out, ReLU gain) on every conv of `module`."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return module


class Bottleneck(nn.Module):
    """ResNet's bottleneck: 1x1 (width/4) -> BN -> ReLU -> 3x3 stride s on (that + `add`) -> BN -> ReLU (the middle
    map, returned too) -> 1x1 (width) -> BN, plus the residual (1x1 stride s + BN when `project`), -> ReLU."""

    def __init__(self, chans: int, width: int, stride: int, project: bool, eps: float):
        super().__init__()
        mid = width // 4
        self.conv1, self.bn1 = nn.Conv2d(chans, mid, 1, bias=False), nn.BatchNorm2d(mid, eps=eps)
        self.conv2, self.bn2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid, eps=eps)
        self.conv3, self.bn3 = nn.Conv2d(mid, width, 1, bias=False), nn.BatchNorm2d(width, eps=eps)
        if project:
            self.residual_conv = nn.Conv2d(chans, width, 1, stride, bias=False)
            self.residual_bn = nn.BatchNorm2d(width, eps=eps)
        self.project = project
        _kaiming(self)

    def forward(self, x: torch.Tensor, add: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(the block's output, its middle map); `add` (a map the size of the middle) joins the 3x3 conv's input."""
        h = F.relu(self.bn1(self.conv1(x)))
        mid = F.relu(self.bn2(self.conv2(h if add is None else h + add)))
        out = self.bn3(self.conv3(mid))
        skip = self.residual_bn(self.residual_conv(x)) if self.project else x
        return F.relu(out + skip), mid


class ConformerStem(nn.Module):
    """image -> conv 7x7/2 -> BN -> ReLU -> maxpool 3/2 -> (tokens of a (p/4)-patch conv, first bottleneck's map)."""

    def __init__(self, spec: family_spec.ConformerStem, ctx: BuildContext):
        super().__init__()
        c, k = spec.stem, spec.patch_size // 4
        self.conv1 = nn.Conv2d(ctx.in_chans, c, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(c)  # eps 1e-5, as released
        self.conv_1 = Bottleneck(c, spec.width, 1, True, spec.norm.eps)
        self.patch_conv = nn.Conv2d(c, ctx.dim, k, k)
        _kaiming(self)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(the patch tokens (B, N, dim), {CONV: the first bottleneck's map}) of an image (B, C, H, W)."""
        base = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        tokens = rearrange(self.patch_conv(base), "b c h w -> b (h w) c")
        return tokens, {family_spec.CONV: self.conv_1(base)[0]}


class FCUDown(nn.Module):
    """CNN map -> tokens: 1x1 conv -> avgpool `down` -> LayerNorm -> GELU (the patch tokens of the coupling)."""

    def __init__(self, chans: int, dim: int, down: int, eps: float):
        super().__init__()
        self.down = down
        self.conv_project = nn.Conv2d(chans, dim, 1)
        self.ln = nn.LayerNorm(dim, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """A CNN map (B, C, H, W) as patch tokens (B, N, dim)."""
        x = F.avg_pool2d(self.conv_project(x), self.down, self.down)
        return F.gelu(self.ln(rearrange(x, "b c h w -> b (h w) c")))


class FCUUp(nn.Module):
    """Patch tokens -> CNN map: 1x1 conv -> BN -> ReLU -> nearest upsample x `up`."""

    def __init__(self, dim: int, chans: int, up: int, grid: tuple[int, int], eps: float):
        super().__init__()
        self.up, self.grid = up, grid
        self.conv_project = nn.Conv2d(dim, chans, 1)
        self.bn = nn.BatchNorm2d(chans, eps=eps)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        """Patch tokens (B, N, dim) as a CNN map (B, C, H, W) at the branch's resolution."""
        x = rearrange(patches, "b (h w) c -> b c h w", h=self.grid[0])
        x = F.relu(self.bn(self.conv_project(x)))
        return x if self.up == 1 else F.interpolate(x, scale_factor=self.up, mode="nearest")


class ConvBranch(nn.Module):
    """A block's CNN side (`ctx.state["conv"]`: the map it receives). `down(conv, x)`: the bottleneck, and the
    tokens plus FCUDown's (the class token added to itself); `up(conv, mid, x)`: med blocks, FCUUp into the fusion
    bottleneck."""

    def __init__(self, spec: family_spec.ConvBranch, ctx: BuildContext):
        super().__init__()
        before, eps, w = ctx.state[family_spec.CONV], spec.norm.eps, spec.width
        mid = spec.mid(before)
        self.cnn_block = Bottleneck(before.chans, w, spec.stride, before.chans != w or spec.stride != 1, eps)
        self.med_block = nn.ModuleList(Bottleneck(w, w, 1, False, eps) for _ in range(spec.med_blocks))
        self.squeeze_block = FCUDown(mid.chans, ctx.dim, spec.down, 1e-6)
        self.expand_block = FCUUp(ctx.dim, mid.chans, spec.down, ctx.grid, eps)
        self.fusion_block = Bottleneck(w, w, spec.fusion_stride, spec.fusion_stride != 1, eps)
        self.prefix = ctx.num_prefix_tokens

    def down(self, conv: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the map after the CNN block, the tokens `x` plus FCUDown's of its middle map)."""
        conv, mid = self.cnn_block(conv)
        return conv, x + torch.cat((x[:, :self.prefix], self.squeeze_block(mid)), dim=1)

    def up(self, conv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The map after the med blocks and the fusion bottleneck, FCUUp of `x`'s patch tokens added in."""
        for block in self.med_block:
            conv = block(conv)[0]
        return self.fusion_block(conv, self.expand_block(x[:, self.prefix:]))[0]


class _SumClassifier(nn.Module):
    """pre_logits (the map's average, then the token head's features) -> conv logits + trans logits."""

    def __init__(self, conv: nn.Module, tokens: nn.Module, split: int):
        super().__init__()
        self.conv, self.tokens, self.split = conv, tokens, split

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x[:, :self.split]) + self.tokens(x[:, self.split:])


class ConformerHead(nn.Module):
    """conv logits = fc(mean of the map), trans logits = the token head on norm(tokens). Asked for its outputs (the
    training loop's request): HeadOutputs conv and trans_* (weight 1/2 each: the mean of the two losses); else, in
    training as in eval, their sum."""

    def __init__(self, spec: family_spec.ConformerHead, ctx: BuildContext):
        super().__init__()
        self.outputs = spec.outputs()
        self.chans = ctx.state[family_spec.CONV].chans
        self.norm = nn.LayerNorm(ctx.dim, eps=spec.norm.eps)
        self.tokens = ctx.child(spec.tokens)
        self.many = spec.tokens.outputs() != LOGITS  # the token head returns HeadOutputs when asked
        self.reset(ctx.num_classes, tokens=False)

    def reset(self, num_classes: int, tokens: bool = True) -> list[nn.Module]:
        """New classifiers for `num_classes` (the token head's too, with `tokens`); returns the new modules."""
        self.fc = Linear(self.chans, num_classes) if num_classes > 0 else nn.Identity()
        return [self.fc] + (self.tokens.reset(num_classes) if tokens else [])

    def classifier(self) -> nn.Module:
        """The final classifier as one module: pre_logits (map average, then token features) -> the summed logits."""
        return _SumClassifier(self.fc, self.tokens.classifier(), self.chans)

    def forward(self, x: torch.Tensor, pre_logits: bool = False, *, state: Mapping[str, torch.Tensor],
                outputs: bool = False):
        """`outputs` (the training loop's request, vspec/nn/head_outputs.py): the conv classifier's HeadOutput and the
        token head's; else the sum of the two logits."""
        pooled = state[family_spec.CONV].mean(dim=(2, 3))
        x = self.norm(x)
        if pre_logits or isinstance(self.fc, nn.Identity):
            return torch.cat((pooled, self.tokens(x, pre_logits=True)), dim=-1)
        out, trans = self.fc(pooled), self.tokens(x, **({"outputs": True} if outputs and self.many else {}))
        if not outputs:
            return out + trans
        trans = trans if isinstance(trans, tuple) else (HeadOutput(trans),)
        return (HeadOutput.of(out, self.outputs[0]),
                *(HeadOutput.of(t.logits, o) for t, o in zip(trans, self.outputs[1:])))


class CoupledBlock(Block):
    """Conformer's ConvTransBlock (`vspec.spec.CoupledBlock`): its CNN side's bottleneck on the map, FCUDown's
    tokens added to x, the pre-norm transformer block, then FCUUp's map fused into the CNN side."""

    def __init__(self, spec: family_spec.CoupledBlock, ctx: BuildContext):
        super().__init__(spec, ctx)
        self.conv = ctx.child(spec.conv)

    def forward(self, x: torch.Tensor, state: Mapping[str, torch.Tensor], *, mask: torch.Tensor | None = None,
                causal: bool = False) -> Carry:
        """The block on tokens `x` and the CNN map in `state`; returns the tokens and the state with the new map."""
        conv, x = self.conv.down(state[family_spec.CONV], x)  # the CNN block; tokens + FCUDown(its middle map)
        x, state = super().forward(x, state, mask=mask, causal=causal)
        return self.carry(x, state, {family_spec.CONV: self.conv.up(conv, x)})

