"""SoT's modules: the convolutional token embedding and the second-order head.

SoT's convolutional token embedding (supplement A), with the released code's module names
(`stem`, `stage`, `transition`) so that released checkpoints map by prefix.

stem: 3x3 conv (bias) + 3x3 max-pool stride 2 -> three blocks, each halving the resolution ->
1x1 conv (bias) to the token width. Block kinds and their released configurations:
- dense: dense block of 6 layers (norm-ReLU-1x1 conv to 32, norm-ReLU-3x3 conv to 16, growth 16; the
  norm is BatchNorm, or none under timm 0.3.4), then a transition BN - 1x1 conv to 128 - 2x2 avg-pool
  (no ReLU; no pool at stride 1), convs without bias;
- resnet: bottleneck (planes 64, expansion 4, stride on the 3x3 conv), BN eps 1e-3 in the main path
  and 1e-5 in the projection shortcut, which a stride-1 bottleneck does not have (identity);
- inception: branches 1x1 -> 32 | 1x1 -> 32, 3x3 -> 64 | 1x1 -> 16, 5x5 -> 16 | 3x3 max-pool,
  1x1 -> 16, each conv without bias + BN (eps 1e-3) + ReLU, stride on each branch's last layer;
- nonlocal: vspec's own construction, not the released code's "Non-local" embedding (two strided convs
  each followed by a non-local block with normalised theta / phi / g and a projection shortcut: 28 x 28
  tokens at 224 px, which the released model's 14 x 14 grid cannot take). vspec's: 3x3 conv stride 2 to
  128 + BN + ReLU, then an embedded-Gaussian non-local block (Wang et al. 2018: theta / phi / g 1x1
  convs to 64, phi without bias since softmax over the keys cannot see one, softmax(theta^T phi) g,
  1x1 conv back + BN, residual).

The head: pool (GAP | GCP | MGCrP) -> normalisation -> fusion with the class token (Eq. 1).
"""

import math
from collections import OrderedDict

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ... import spec as specs
from ...nn.context import BuildContext
from ...nn.head_outputs import HeadOutput, last_real, last_real_token
from ...nn.layers import AttentionCore, Linear, make_norm, masked_mean
from ...ops.dropout import Dropout
from . import spec as family_spec
from .ops import cross_covariance, epn, isqrt_cov, svpn_approx, svpn_exact

__all__ = ["Bottleneck", "DenseBlock", "DenseLayer", "EPN", "GAPPool", "GCP", "InceptionBlock", "LearnableScale",
           "MGCrP", "NoNorm", "NonLocalBlock", "ReprLayerNorm", "SecondOrderHead", "SoTEmbed", "SumOfClassifiers",
           "SvPN", "Transition", "conv_bn_relu", "masked_batch_norm"]


def conv_bn_relu(c_in: int, c_out: int, k: int, stride: int = 1, eps: float = 1e-3) -> nn.Sequential:
    """conv (no bias) + BN + ReLU, named `conv` / `bn` as in the released Inception blocks.

    Args:
        c_in: input channels.
        c_out: output channels.
        k: the kernel side (padding k // 2).
        stride: the conv's stride.
        eps: the BatchNorm's eps.
    """
    return nn.Sequential(OrderedDict(conv=nn.Conv2d(c_in, c_out, k, stride, k // 2, bias=False),
                              bn=nn.BatchNorm2d(c_out, eps=eps), relu=nn.ReLU(inplace=True)))


class DenseLayer(nn.Module):
    """norm - ReLU - 1x1 conv - norm - ReLU - 3x3 conv, concatenated to its input; `norm` BatchNorm
    (timm >= 0.4) or none (timm 0.3.4: the ReLUs alone)."""

    def __init__(self, c_in: int, norm: specs.Norm, growth: int = 16, bottleneck: int = 32):
        super().__init__()
        self.norm1 = make_norm(norm, c_in, "map")
        self.conv1 = nn.Conv2d(c_in, bottleneck, 1, bias=False)
        self.norm2 = make_norm(norm, bottleneck, "map")
        self.conv2 = nn.Conv2d(bottleneck, growth, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, C, H, W) with `growth` new channels concatenated."""
        h = self.conv1(F.relu(self.norm1(x)))
        return torch.cat((x, self.conv2(F.relu(self.norm2(h)))), dim=1)


class DenseBlock(nn.Sequential):
    """`layers` DenseLayers (`denselayer1`, ...), each adding `growth` channels to what it reads."""

    def __init__(self, c_in: int, norm: specs.Norm, layers: int = 6, growth: int = 16):
        super().__init__()
        for i in range(layers):
            self.add_module(f"denselayer{i + 1}", DenseLayer(c_in + i * growth, norm, growth))


class Transition(nn.Sequential):
    """BN - 1x1 conv to `c_out` - 2x2 average pool (`downsample`; else none), no ReLU."""

    def __init__(self, c_in: int, c_out: int, downsample: bool):
        super().__init__()
        self.norm = nn.BatchNorm2d(c_in)
        self.conv = nn.Conv2d(c_in, c_out, 1, bias=False)
        self.pool = nn.AvgPool2d(2) if downsample else nn.Identity()


class Bottleneck(nn.Module):
    """ResNet's bottleneck (1x1, 3x3 at `stride`, 1x1 to `planes * expansion`) with a residual; SoT's resnet
    token embedding."""

    def __init__(self, c_in: int, planes: int = 64, stride: int = 2, expansion: int = 4):
        super().__init__()
        out = planes * expansion
        self.conv1 = nn.Conv2d(c_in, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes, eps=1e-3, momentum=0.01)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes, eps=1e-3, momentum=0.01)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out, eps=1e-3, momentum=0.01)
        # a projection shortcut where the block downsamples; at stride 1 the released code has none
        self.downsample = nn.Sequential(nn.Conv2d(c_in, out, 1, stride, bias=False), nn.BatchNorm2d(out)) \
            if stride != 1 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, C, H, W) -> (B, planes * expansion, H / stride, W / stride)."""
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return F.relu(self.bn3(self.conv3(h)) + self.downsample(x))


class InceptionBlock(nn.Module):
    """Four branches (1x1; 1x1, 3x3; 1x1, 5x5; 3x3 max-pool, 1x1), each at `stride`, concatenated to 128
    channels; SoT's inception token embedding."""

    def __init__(self, c_in: int, stride: int = 2):
        super().__init__()
        self.branch0 = conv_bn_relu(c_in, 32, 1, stride)
        self.branch1 = nn.Sequential(conv_bn_relu(c_in, 32, 1), conv_bn_relu(32, 64, 3, stride))
        self.branch2 = nn.Sequential(conv_bn_relu(c_in, 16, 1), conv_bn_relu(16, 16, 5, stride))
        self.branch3 = nn.Sequential(nn.MaxPool2d(3, stride, 1), conv_bn_relu(c_in, 16, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, C, H, W) -> (B, 128, H / stride, W / stride)."""
        return torch.cat([self.branch0(x), self.branch1(x), self.branch2(x), self.branch3(x)], dim=1)


class NonLocalBlock(nn.Module):
    """Strided 3x3 conv + BN + ReLU, then y = x + BN(W softmax(theta(x)^T phi(x)) g(x))."""

    def __init__(self, c_in: int, c_out: int = 128, stride: int = 2):
        super().__init__()
        inner = c_out // 2
        self.down = conv_bn_relu(c_in, c_out, 3, stride, eps=1e-5)
        self.theta = nn.Conv2d(c_out, inner, 1)
        self.phi = nn.Conv2d(c_out, inner, 1, bias=False)  # a key bias shifts a query's scores alike
        self.g = nn.Conv2d(c_out, inner, 1)
        self.out = nn.Sequential(nn.Conv2d(inner, c_out, 1), nn.BatchNorm2d(c_out))
        self.core = AttentionCore(scale=1.0)  # softmax(theta^T phi) g, unscaled

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, C, H, W) -> (B, c_out, H / stride, W / stride)."""
        x = self.down(x)
        h, w = x.shape[-2:]
        q, k, v = (rearrange(f(x), "b c h w -> b (h w) c") for f in (self.theta, self.phi, self.g))
        y = self.core(q, k, v)
        return x + self.out(rearrange(y, "b (h w) c -> b c h w", h=h, w=w))


def _stage(spec: family_spec.SoTEmbed) -> tuple[nn.Sequential, int]:
    """The three resolution-halving blocks and their output channels."""
    block, c_in, strides = spec.block, spec.stem_dim, spec.strides
    if block == "dense":
        mods, c = [], c_in
        for s in strides:
            mods += [DenseBlock(c, spec.dense_norm), Transition(c + 6 * 16, 128, downsample=s == 2)]
            c = 128
        return nn.Sequential(*mods), 128
    if block == "resnet":
        return nn.Sequential(*(Bottleneck(c_in if i == 0 else 256, stride=s) for i, s in enumerate(strides))), 256
    if block == "inception":
        return nn.Sequential(*(InceptionBlock(c_in if i == 0 else 128, s) for i, s in enumerate(strides))), 128
    return nn.Sequential(*(NonLocalBlock(c_in if i == 0 else 128, 128, s) for i, s in enumerate(strides))), 128


class SoTEmbed(nn.Module):
    """The module of `spec.SoTEmbed`: stem, three resolution-halving blocks (`spec.block`) and a 1x1 conv to the
    token width; (B, C, H, W) -> (B, N, dim)."""

    def __init__(self, spec: family_spec.SoTEmbed, ctx: BuildContext):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(ctx.in_chans, spec.stem_dim, 3, padding=1), nn.MaxPool2d(3, 2, 1))
        self.stage, c = _stage(spec)
        self.transition = nn.Conv2d(c, ctx.dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """An image (B, C, H, W) as tokens (B, N, dim)."""
        return rearrange(self.transition(self.stage(self.stem(x))), "b d h w -> b (h w) d")


# ---------------------------------------------------------------- pools: (B, N, dim) -> representation
# `mask` (B, N) bool: the tokens to pool (a padded text batch's real word tokens); None: all of them
class GAPPool(nn.Module):
    """The mean of the (masked) tokens: (B, N, dim) -> (B, dim)."""

    def __init__(self, spec: family_spec.GAPPool, ctx: BuildContext):
        super().__init__()

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The mean of the tokens `mask` keeps (all where None): (B, N, dim) -> (B, dim)."""
        return masked_mean(z, mask)


class GCP(nn.Module):
    """Covariance of the reduced tokens, square-rooted by iSQRT, upper triangle (row-major)."""

    def __init__(self, spec: family_spec.GCP, ctx: BuildContext):
        super().__init__()
        self.reduce = Linear(ctx.dim, spec.dim, bias=False)
        self.iters = spec.iters
        self.register_buffer("triu", torch.triu_indices(spec.dim, spec.dim), persistent=False)

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The upper triangle of the square-rooted covariance of the reduced tokens: (B, N, dim) -> (B, d(d+1)/2)."""
        x = self.reduce(z)
        root = isqrt_cov(cross_covariance(x, x, centering="channel", mask=mask), iters=self.iters)
        return root[:, self.triu[0], self.triu[1]]


def masked_batch_norm(bn: nn.BatchNorm1d, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`bn` in training on the tokens of h (B, N, C) that `mask` (B, N) keeps, as `bn(h[mask])` at those tokens
    (its running statistics updated as BatchNorm does), without selecting them: a selection's size is read back
    from the device, this reads nothing. The moments in float32 at least (under autocast too).

    Args:
        bn: the BatchNorm1d (its statistics updated in place).
        h: (B, N, C) features.
        mask: (B, N) bool, the tokens normalised.
    """
    x = h.to(torch.promote_types(h.dtype, torch.float32))
    keep = mask[..., None].to(x.dtype)
    n = keep.sum((0, 1))
    mean = (x * keep).sum((0, 1)) / n
    var = ((x - mean) ** 2 * keep).sum((0, 1)) / n  # biased: what the batch is normalised by
    if bn.track_running_stats:
        with torch.no_grad():
            bn.num_batches_tracked.add_(1)
            momentum = 1.0 / bn.num_batches_tracked.double() if bn.momentum is None else bn.momentum
            bn.running_mean.mul_(1 - momentum).add_(momentum * mean)
            bn.running_var.mul_(1 - momentum).add_(momentum * var * n / (n - 1))  # unbiased, as BatchNorm keeps
    y = (x - mean) * torch.rsqrt(var + bn.eps)
    return y * bn.weight + bn.bias if bn.affine else y


class MGCrP(nn.Module):
    """Eq. 2-3: per head, Q_i = (1/N) (W_i Z)(R_i Z)^T; `wr` stacks every W_i, then every R_i; `bn` (with
    `bn_relu`) normalises every projected channel, followed by a ReLU."""

    def __init__(self, spec: family_spec.MGCrP, ctx: BuildContext):
        super().__init__()
        self.heads, self.m, self.n, self.centering = spec.heads, spec.m, spec.n, spec.centering
        width = spec.heads * (spec.m + spec.n)
        self.wr = Linear(ctx.dim, width, bias=False)
        self.bn = nn.BatchNorm1d(width) if spec.bn_relu else None

    def bn_relu(self, h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """ReLU(BN(h)) per channel; batch statistics (training) over the pooled tokens alone, 0 at the others."""
        if mask is None or not self.bn.training:
            return F.relu(self.bn(h.flatten(0, 1))).reshape(h.shape)
        return torch.where(mask[..., None], F.relu(masked_batch_norm(self.bn, h, mask)), 0.0).to(h.dtype)

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Per head, the cross-covariance of the two projections: (B, N, dim) -> (B, heads, m, n)."""
        h = self.wr(z)
        if self.bn is not None:
            h = self.bn_relu(h, mask)
        x, y = h.split((self.heads * self.m, self.heads * self.n), dim=-1)
        x = rearrange(x, "b t (h m) -> b h t m", h=self.heads)
        y = rearrange(y, "b t (h n) -> b h t n", h=self.heads)
        mask = None if mask is None else mask[:, None]  # every head
        return cross_covariance(x, y, centering=self.centering, mask=mask)  # (B, heads, m, n)


# ---------------------------------------------------------------- normalisations of the representation
class SvPN(nn.Module):
    """Eq. 5 (exact) or Eq. 6-8 (approximate) per head; `v0` is the power iteration's start vector."""

    def __init__(self, spec: family_spec.SvPN, ctx: BuildContext):
        super().__init__()
        self.spec = spec
        n = ctx.in_shape[-1 if spec.side == "right" else -2]
        if spec.method == "approx" and spec.start == "learnable":
            self.v0 = nn.Parameter(torch.ones(n))
        else:
            self.register_buffer("v0", torch.ones(n), persistent=False)

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        """svPN of each head's matrix (B, heads, m, n), exact or approximate."""
        s = self.spec
        if s.method == "exact":
            return svpn_exact(q, alpha=s.alpha)
        # the released form: the top directions keep s^alpha exactly, eps damps only the residual
        # (Eq. 8 itself when eps = 0); started on the left, it is svPN of Q^T (the same spectrum), transposed
        left = s.side == "left"
        y = svpn_approx(q.mT if left else q, alpha=s.alpha, num_sv=s.num_sv, iters=s.iters, v0=self.v0, eps=s.eps,
                        released_form=True)
        return y.mT if left else y


class EPN(nn.Module):
    """Element-wise power normalisation (`ops.epn`) of the flattened representation."""

    def __init__(self, spec: family_spec.EPN, ctx: BuildContext):
        super().__init__()

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        """EPN of the flattened representation: (B, ...) -> (B, features)."""
        return epn(r.flatten(1))


class LearnableScale(nn.Module):
    """The representation times a learned 1 / tau, started at `spec.init`."""

    def __init__(self, spec: family_spec.LearnableScale, ctx: BuildContext):
        super().__init__()
        self.inv_tau = nn.Parameter(torch.tensor(float(spec.init)))

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        """r times 1 / tau."""
        return r * self.inv_tau


class ReprLayerNorm(nn.LayerNorm):
    """LayerNorm over the flattened representation (all its `ctx.in_shape` entries)."""

    def __init__(self, spec: family_spec.ReprLayerNorm, ctx: BuildContext):
        super().__init__(math.prod(ctx.in_shape), eps=spec.eps)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        """LayerNorm of the flattened representation: (B, ...) -> (B, features)."""
        return super().forward(r.flatten(1))


class NoNorm(nn.Identity):
    """No normalisation of the representation."""

    def __init__(self, spec: family_spec.NoNorm, ctx: BuildContext):
        super().__init__()


# ---------------------------------------------------------------- the head
class SecondOrderHead(nn.Module):
    """Eq. 1. Classifiers: `cls_fc` (z0) and `word_fc` (representation) for sum and late fusion; `fc` for concat ([z0,
    r]) and aggr_all. z0 is the class token (a text body's first token), the mean word token (`z0 = mean_token`) or a
    text body's last real token (`last_token`, the word tokens the others). Late fusion returns HeadOutputs cls and
    word (z0 and word logits, weight 1 each: vspec/nn/head_outputs.py) when its outputs are asked for (the training
    loop's request), their sum otherwise; `branches(x)` gives the pair in either mode. `mask` (B, N): a padded text
    batch's real tokens; padding `masked` pools those alone, `included` every position after the first (released)."""

    def __init__(self, spec: family_spec.SecondOrderHead, ctx: BuildContext):
        super().__init__()
        self.fusion, self.z0, self.outputs = spec.fusion, spec.z0, spec.outputs()
        self.masked = spec.padding == "masked"
        # tokens before the word tokens: the class token, which a text body's first token is for z0 unset
        self.skip = 0 if spec.fusion == "aggr_all" else ctx.num_prefix_tokens or int(
            ctx.tokens.sequence and spec.z0 is None)
        self.pool = ctx.child(spec.pool)
        self.repr_dim = spec.repr_dim(ctx.dim)
        self.norm = ctx.child(spec.norm, in_shape=spec.repr_shape(ctx.dim))
        self.drop = Dropout(spec.drop) if spec.drop else nn.Identity()
        self.dim = ctx.dim
        self.num_features = self.repr_dim + (0 if spec.fusion == "aggr_all" else ctx.dim)  # pre-logits width
        self.reset(ctx.num_classes)

    def reset(self, num_classes: int) -> list[nn.Module]:
        """New classifiers for `num_classes` (identities for 0); returns them."""
        def fc(width):
            return Linear(width, num_classes) if num_classes > 0 else nn.Identity()

        if self.fusion in ("sum", "late"):
            self.cls_fc, self.word_fc = fc(self.dim), fc(self.repr_dim)
            return [self.cls_fc, self.word_fc]
        self.fc = fc(self.num_features)
        return [self.fc]

    def classifier(self) -> nn.Module:
        """The module that maps `forward(x, pre_logits=True)` to the (eval) logits."""
        if self.fusion in ("sum", "late") and isinstance(self.cls_fc, Linear):
            return SumOfClassifiers(self.cls_fc, self.word_fc, self.dim)
        return getattr(self, "fc", nn.Identity())

    def words(self, x: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The word tokens and which of them to pool (None: all)."""
        z, mask = x[:, self.skip:], None if mask is None or not self.masked else mask[:, self.skip:]
        if self.z0 != "last_token":
            return z, mask
        if mask is None:
            return z[:, :-1], None
        last = last_real(mask, z.shape[1], z.device)
        return z, mask & (torch.arange(z.shape[1], device=z.device) != last[:, None])

    def first_order(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """z0: the class token, the mean word token or the last real token."""
        if self.z0 is None:
            return x[:, 0]
        if self.z0 == "last_token":
            return last_real_token(x, mask)
        return masked_mean(*self.words(x, mask))

    def representation(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """norm(pool(tokens)) flattened; aggr_all pools every token, the others the word tokens."""
        z, mask = self.words(x, mask)
        pooled = self.pool(z) if mask is None else self.pool(z, mask)  # a pool kind may take no mask
        return self.drop(self.norm(pooled).flatten(1))

    def branches(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(z0 logits, word-token logits) for sum and late fusion."""
        return self.cls_fc(self.first_order(x, mask)), self.word_fc(self.representation(x, mask))

    def forward(self, x: torch.Tensor, pre_logits: bool = False, mask: torch.Tensor | None = None,
                outputs: bool = False):
        """`outputs` (the training loop's request, vspec/nn/head_outputs.py): late fusion's two HeadOutputs; else the
        logits, the two branches summed for sum and late fusion."""
        if self.fusion in ("sum", "late"):
            if pre_logits or isinstance(self.cls_fc, nn.Identity):  # num_classes 0: the features
                return torch.cat((self.first_order(x, mask), self.representation(x, mask)), dim=1)
            cls, word = self.branches(x, mask)
            if self.fusion == "late" and outputs:
                return tuple(HeadOutput.of(o, d) for o, d in zip((cls, word), self.outputs))
            return cls + word
        r = self.representation(x, mask)
        features = torch.cat((self.first_order(x, mask), r), dim=1) if self.fusion == "concat" else r
        return features if pre_logits else self.fc(features)


class SumOfClassifiers(nn.Module):
    """Pre-logits [z0, r] -> cls_fc(z0) + word_fc(r): the sum and late fusions' classifier as one
    callable (what `get_classifier()` returns); it shares the head's layers."""

    def __init__(self, cls_fc: nn.Module, word_fc: nn.Module, dim: int):
        super().__init__()
        self.cls_fc, self.word_fc, self.dim = cls_fc, word_fc, dim

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """cls_fc(z0) + word_fc(r) of pre-logits [z0, r]."""
        return self.cls_fc(features[:, :self.dim]) + self.word_fc(features[:, self.dim:])
