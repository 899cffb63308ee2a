"""Refiner's modules: the map pipelines (the paper's Fig. 3a and Refined-ViT's
released DLA), the attention whose maps are materialised and handed from block to block, and the adjusted block.
Refined-ViT's CNN patch stem is the core's `vspec.nn.stems.ConvStem` (LV-ViT's too).

Speed (where the CPU fast paths run, `ops.fast.enabled`): the released DLA runs channels-last (oneDNN's
convolutions reorder NCHW inputs, which costs more than the depthwise and 1x1 convolutions themselves on the
(B, H, N, N) maps). In eval its BatchNorms (running statistics) are
folded into the convolutions; its last two with the identity become one 1x1 convolution plus a
per-head scale of the input. In training it runs as written, NCHW: channels-last convolutions and
BatchNorms sum less accurately (issue 19), and a channels-last DLA with accurate batch statistics measured
no faster than NCHW (benchmarks/fast_paths.py, plain/fast 0.89-0.94 on AVX-512, 0.94-1.05 on AVX2), so it
was dropped. With the switch off (the profiler) the modules run their plain ops, so that every BatchNorm
is counted."""


from collections.abc import Mapping

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ... import spec as specs
from ...nn.blocks import NO_STATE, Block, Carry
from ...nn.context import BuildContext
from ...nn.layers import AttentionCore, AttentionCoreBase, Linear, sdpa_masks
from ...nn.stems import ConvStem, bn_affine, on_running_stats  # noqa: F401 - ConvStem: its earlier place
from ...ops import fast
from ...ops.dropout import Dropout
from . import spec as family_spec

__all__ = ["AdjustedBlock", "ConvExpandDLA", "DLA", "MapAttention", "MapRefiner", "REFINERS", "Refiner",
           "RefinerAttention", "SameConv2d", "masks_around"]


class SameConv2d(nn.Conv2d):
    """A stride-1 conv, no bias, whose output keeps the input size: (k - 1) / 2 zeros on each side of
    each axis, the odd one after (TensorFlow's "same", the released Conv2dSamePadding)."""

    def __init__(self, channels_in: int, channels_out: int, kernel: int | tuple[int, int], groups: int = 1):
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        self.pad = (0, 0, 0, 0) if kh % 2 and kw % 2 else ((kw - 1) // 2, kw // 2, (kh - 1) // 2, kh // 2)
        padding = (kh // 2, kw // 2) if kh % 2 and kw % 2 else 0
        super().__init__(channels_in, channels_out, (kh, kw), padding=padding, groups=groups, bias=False)

    def forward(self, x: torch.Tensor, weight: torch.Tensor | None = None,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        """The convolution, or with `weight` (and `bias`) in place of its own (a folded BatchNorm)."""
        x = F.pad(x, self.pad) if any(self.pad) else x
        return super().forward(x) if weight is None else self._conv_forward(x, weight, bias)


class DLA(nn.Module):
    """Distributed local attention (Sec. 3.3): a k x k head-wise convolution of each map (no bias),
    A*_ij = sum_ab w_ab A_{i - k/2 + a, j - k/2 + b}, under a constraint (Table 4): none (the N x N map
    as an image) | spatial (each query's row of keys laid on the token grid; prefix keys pass) |
    row_col (a 1 x k conv along the keys plus a k x 1 conv along the queries)."""

    def __init__(self, maps: int, kernel: int, constraint: str, tokens: specs.Tokens):
        super().__init__()
        self.constraint, self.grid, self.prefix = constraint, tokens.grid, tokens.prefix
        if constraint == "row_col":
            self.row = SameConv2d(maps, maps, (1, kernel), groups=maps)
            self.col = SameConv2d(maps, maps, (kernel, 1), groups=maps)
        else:
            self.conv = SameConv2d(maps, maps, kernel, groups=maps)

    def forward(self, a: torch.Tensor, causal: bool = False) -> torch.Tensor:
        """The maps (B, H, N, N) convolved under the constraint; `causal`: no key after the query reaches it."""
        if self.constraint == "none":
            return _causal_conv(self.conv, a) if causal else self.conv(a)
        if self.constraint == "row_col":
            return self.row(a) + (_causal_conv(self.col, a) if causal else self.col(a))
        p, (h, w), n = self.prefix, self.grid, a.shape[2]
        keys = rearrange(a[..., p:], "b c n (h w) -> (b n) c h w", h=h, w=w)
        keys = rearrange(self.conv(keys), "(b n) c h w -> b c n (h w)", n=n)
        return torch.cat((a[..., :p], keys), dim=-1) if p else keys


def _causal_conv(conv: SameConv2d, a: torch.Tensor) -> torch.Tensor:
    """`conv` over the maps of a causal body: "same" along the keys, but along the queries row i reads rows
    i - k + 1 .. i only, so that no later token reaches token i (vspec's construction: the paper's DLA is
    centred, which would read row i + 1)."""
    kh, kw = conv.kernel_size
    return F.conv2d(F.pad(a, ((kw - 1) // 2, kw // 2, kh - 1, 0)), conv.weight, groups=conv.groups)


class MapRefiner(nn.Module):
    """A module that refines attention maps, forward(maps (B, H, N, N)) -> (B, H', N, N): `vspec analyze` shows
    its input as the maps before refinement and its output as the maps after (Fig. 1, Fig. 5); a module of any
    family that subclasses it is shown so."""


class Refiner(MapRefiner):
    """The paper's refiner (Fig. 3a), linear in the maps: expansion W_A (H -> rH maps, Sec. 3.2; left out
    without `expand`), DLA on each expanded map, reduction (rH -> H, Sec. 3.4), 1x1 convolutions over heads."""

    def __init__(self, spec: family_spec.Refine, heads: int, tokens: specs.Tokens):
        super().__init__()
        wide = heads * spec.expansion
        self.expand = nn.Conv2d(heads, wide, 1, bias=False) if spec.expand else None
        self.dla = DLA(wide, spec.kernel, spec.constraint, tokens) if spec.kernel else None
        self.reduce = nn.Conv2d(wide, heads, 1, bias=False) if spec.reduction else None

    def forward(self, a: torch.Tensor, causal: bool = False) -> torch.Tensor:
        """The maps (B, H, N, N) expanded, through the DLA, reduced; `causal` as the DLA's."""
        if self.expand is not None:
            a = self.expand(a)
        if self.dla is not None:
            a = self.dla(a, causal)
        return a if self.reduce is None else self.reduce(a)


class ConvExpandDLA(MapRefiner):
    """Refined-ViT's DLA ("conv_exapnd") and the BatchNorm after it: A' = BN_H(A + bn3(conv_pro(
    relu6(bn2(dw(relu6(bn1(conv_exp(A))))))))), conv_exp a 1x1 conv H -> rH (left out when r = 1), dw a
    depthwise k x k conv with "same" padding, conv_pro a 1x1 conv rH -> H; no biases. Names as released."""

    def __init__(self, spec: family_spec.Refine, heads: int, tokens: specs.Tokens):
        super().__init__()
        wide = heads * spec.expansion
        self.conv_exp = nn.Conv2d(heads, wide, 1, bias=False) if spec.expansion != 1 else None
        self.bn1 = nn.BatchNorm2d(wide) if spec.expansion != 1 else None
        self.depth_sep_conv = SameConv2d(wide, wide, spec.kernel, groups=wide)
        self.bn2 = nn.BatchNorm2d(wide)
        self.conv_pro = nn.Conv2d(wide, heads, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(heads)
        self.adapt_bn = nn.BatchNorm2d(heads)
        with torch.no_grad():  # non-negative kernels on non-negative maps: no expanded map starts dead at a ReLU6
            for conv in (self.conv_exp, self.depth_sep_conv):
                if conv is not None:
                    conv.weight.abs_()

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        """The maps (B, H, N, N) refined; the BatchNorms folded into one fused pass where the fast paths run
        in eval."""
        bns = [bn for bn in (self.bn1, self.bn2, self.bn3, self.adapt_bn) if bn is not None]
        if fast.enabled(a) and on_running_stats(bns):
            return self.folded(a.contiguous(memory_format=torch.channels_last), a)
        return self.plain(a)

    def plain(self, a: torch.Tensor) -> torch.Tensor:
        """The module as written."""
        x = a if self.conv_exp is None else F.relu6(self.bn1(self.conv_exp(a)))
        x = F.relu6(self.bn2(self.depth_sep_conv(x)))
        return self.adapt_bn(a + self.bn3(self.conv_pro(x)))

    def folded(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """`plain` with the BatchNorms on their running statistics folded into the convolutions:
        adapt_bn(a + bn3(conv_pro x)) = sa a + (sa s3 conv_pro) x + sa c3 + ca. `x`: `a` channels-last."""
        if self.conv_exp is not None:
            s, c = bn_affine(self.bn1)
            x = F.relu6(F.conv2d(x, self.conv_exp.weight * s[:, None, None, None], c), inplace=True)
        s, c = bn_affine(self.bn2)
        x = F.relu6(self.depth_sep_conv(x, self.depth_sep_conv.weight * s[:, None, None, None], c), inplace=True)
        s3, c3 = bn_affine(self.bn3)
        sa, ca = bn_affine(self.adapt_bn)
        y = F.conv2d(x, self.conv_pro.weight * (s3 * sa)[:, None, None, None], c3 * sa + ca)
        return y.contiguous().addcmul_(sa[:, None, None], a)


REFINERS = {"paper": Refiner, "released": ConvExpandDLA}


def masks_around(mask: torch.Tensor | None, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What multiplies the maps before the DLA (m_i m_j: real queries and keys, and the lower triangle when
    causal) and after it (m_j and the lower triangle), so that a padded sequence's map equals the map of its
    real tokens alone and the DLA spreads nothing onto a key it may not see (the DLA reads neighbours, whose
    "same" zero padding the masked positions then stand for).

    Args:
        mask: (B, N) bool, the real tokens; None: all real.
        keep: the attention's boolean mask, True where a query may attend (`sdpa_masks`', or the lower triangle).

    Returns:
        The two masks, before and after.
    """
    if mask is None:
        return keep, keep
    real = mask[:, None, :, None] & mask[:, None, None, :]
    return real & keep, keep & mask[:, None, None, :]


class MapAttention(AttentionCoreBase):
    """The attention with its maps materialised (B, H, N, N): A = softmax(q k^T * scale) (+ scale x the
    incoming maps), or the incoming maps themselves when the block reuses them (q, k None); then the
    refiner, if any; then A v. Returns (A v, the maps handed on: the incoming ones when reused, else A)."""

    returns_maps = True

    def __init__(self, spec: family_spec.RefinerAttention, tokens: specs.Tokens, scale: float):
        super().__init__()
        self.scale, self.released = scale, spec.form == "released"
        self.add_incoming = spec.add_incoming
        self.refine = REFINERS[spec.refine.form](spec.refine, spec.heads, tokens) if spec.refine else None
        self.drop = Dropout(spec.attn_drop) if spec.attn_drop else nn.Identity()

    def forward(self, q: torch.Tensor | None, k: torch.Tensor | None, v: torch.Tensor, maps: torch.Tensor | None,
                mask: torch.Tensor | None = None, causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(z = A v (B, heads, N, d), the maps handed on: the incoming ones when it reuses them, else A)."""
        keep, lower = sdpa_masks(mask, causal, v.shape[2])
        if lower:
            keep = torch.ones(v.shape[2], v.shape[2], dtype=torch.bool, device=v.device).tril()
        if q is None:  # reuse (Table 13)
            a = maps
        else:  # the released q * sqrt(scale) . k * sqrt(scale), as (q * scale) . k (equal up to rounding)
            a = torch.matmul(q * self.scale, k.transpose(-2, -1))
            a = (a if keep is None else a.masked_fill(~keep, float("-inf"))).softmax(dim=-1)
            if self.add_incoming:  # in place where no autograd keeps the softmax for backward
                a = a.add_(maps, alpha=self.scale) if not torch.is_grad_enabled() else a.add(maps, alpha=self.scale)
        if self.refine is not None and keep is None:
            a = self.refine(a)
        elif self.refine is not None:  # padded or causal: the map of the real tokens alone, zero around it
            before, after = masks_around(mask, keep)
            a = self.refine(a * before, causal) * after
        z = torch.matmul(self.drop(a), v)
        if q is None and self.refine is not None and self.released:  # (A' scale) v, as (A' v) scale
            z = z * self.scale
        return z, (maps if q is None else a)


class RefinerAttention(nn.Module):
    """Attention that hands its maps on (spec: RefinerAttention). `qkv` projects q, k and the values
    (values only when the block reuses the incoming maps); the value heads are the maps it aggregates
    with (more than `heads` when the refiner has no reduction). `forward(x, state)` reads the incoming maps
    (`state["maps"]`) and returns (output, {"maps": the maps handed on}, or {} when no later block takes them). A
    block with nothing to do with maps stays on SDPA (AttentionCore)."""

    def __init__(self, spec: family_spec.RefinerAttention, ctx: BuildContext):
        super().__init__()
        inner = spec.inner_dim(ctx.dim)
        self.heads, self.value_heads = spec.heads, spec.maps_used
        head_dim = inner // spec.heads
        self.widths = list(spec.role_widths(ctx.dim).values())  # [q, k,] v
        self.qkv = Linear(ctx.dim, sum(self.widths), bias=spec.qkv_bias)
        self.proj = Linear(self.widths[-1], ctx.dim, bias=spec.proj_bias)
        self.proj_drop = Dropout(spec.proj_drop) if spec.proj_drop else nn.Identity()
        scale = spec.scale or head_dim**-0.5
        self.sdpa = not (spec.refine or spec.consumes_maps or family_spec.MAPS in ctx.hands_on)
        self.consumes = spec.consumes_maps
        self.core = AttentionCore(spec.attn_drop, scale) if self.sdpa else MapAttention(spec, ctx.tokens, scale)

    def forward(self, x: torch.Tensor, state: Mapping[str, torch.Tensor], *, mask: torch.Tensor | None = None,
                causal: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(tokens (B, N, dim), {"maps": the maps handed on} or {}) of `x` and the incoming maps in `state`."""
        *qk, v = self.qkv(x).split(self.widths, dim=-1)
        q, k = (rearrange(y, "b n (h d) -> b h n d", h=self.heads) for y in qk) if qk else (None, None)
        v = rearrange(v, "b n (h d) -> b h n d", h=self.value_heads)
        if self.sdpa:
            z, wrote = self.core(q, k, v, *sdpa_masks(mask, causal, x.shape[1])), {}
        else:
            z, maps = self.core(q, k, v, state[family_spec.MAPS] if self.consumes else None, mask, causal)
            wrote = {family_spec.MAPS: maps}
        return self.proj_drop(self.proj(rearrange(z, "b h n d -> b n (h d)"))), wrote


class AdjustedBlock(Block):
    """Refined-ViT's block (`vspec.spec.AdjustedBlock`): each branch reads norm(a x) and adds f / a, a =
    `adjust_ratio` (0.5: x + 2 attn(LN(x / 2)))."""

    def __init__(self, spec: family_spec.AdjustedBlock, ctx: BuildContext):
        super().__init__(spec, ctx)
        self.ratio = spec.adjust_ratio

    def forward(self, x: torch.Tensor, state: Mapping[str, torch.Tensor] = NO_STATE, *,
                mask: torch.Tensor | None = None, causal: bool = False) -> Carry:
        """The block on tokens `x` (B, N, dim); a Carry of the new tokens and the state (`Block.carry`)."""
        r = self.ratio
        h, wrote = self.attend(self.norm1(x * r), state, mask, causal)
        x = x + self.drop_path(self.ls1(h / r))
        x = x + self.drop_path(self.ls2(self.ffn(self.norm2(x * r)) / r))
        return self.carry(x, state, wrote)

