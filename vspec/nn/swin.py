"""Swin's modules: (shifted) window attention and patch merging, with timm's parameter names
(`qkv`, `proj`, `relative_position_bias_table`; `norm`, `reduction`)."""

import torch
from einops import rearrange
from torch import nn

from .. import spec as specs
from ..ops import fast, permute_tokens, relative_position_index, shift_mask, window_order
from ..ops.attention import short_path
from ..ops.dropout import Dropout, dropout
from .context import BuildContext
from .layers import AttentionCore, Linear, ProjectedAttention, make_norm

__all__ = ["BiasedAttentionCore", "PatchMerging", "WindowMHSA"]


class BiasedAttentionCore(AttentionCore):
    """The attention core with a learnable float mask (the relative position bias). Through SDPA, but
    for training on the CPU: there SDPA has no fused kernel for a mask that needs a gradient, and its
    generic fallback spends extra passes (q and k both scaled, a "safe" softmax), so the same math is
    written out where the fast paths run
    (`ops.fast.enabled`; tests/ops/test_ops.py: equal to SDPA; benchmarks/fast_paths.py: the faster Swin training),
    except in bf16 where `sdpa` takes ShortAttention (`ops.attention.short_path`), which holds the map anyway."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T x scale + mask) v, the relative-position bias in the mask."""
        if not (mask.requires_grad and torch.is_grad_enabled() and fast.enabled(q)) or short_path(q, k, v, mask):
            return super().forward(q, k, v, mask)
        scale = self.scale if self.scale is not None else q.shape[-1] ** -0.5
        attn = ((q * scale) @ k.transpose(-2, -1) + mask).softmax(dim=-1)
        drop = self.drop if self.training else 0.0
        return (dropout(attn, drop) if drop else attn) @ v


class WindowMHSA(ProjectedAttention):
    """Swin Eq. 4 per window: softmax(q k^T * scale + B) v, B gathered from the relative position bias
    table; a shifted block adds the shift mask (-100 between tokens the roll made neighbours).

    Unshifted, the window partition is part of q / k / v's split into heads (the projections are per token),
    undone in the heads' merge; shifted, the cyclic shift and the partition are one gather of the tokens (`order`),
    undone by its inverse after the attention. The bias (and the
    shift mask, per window) is the attention's float mask; shifted windows fold into the heads axis,
    (B, windows x heads, n, d), so that the per-window mask broadcasts over the batch."""

    def __init__(self, spec: specs.WindowMHSA, ctx: BuildContext):
        super().__init__()
        grid, d = ctx.grid, ctx.dim
        self.window = spec.window_size(grid)
        shift = spec.shift_size(grid, ctx.index_in_stage)
        self.heads, self.area = spec.heads, self.window[0] * self.window[1]
        self.windows = (grid[0] // self.window[0], grid[1] // self.window[1])
        self.init_projections(spec, d, spec.inner_dim(d))  # fused qkv / proj, or tied / grouped projections
        self.core = BiasedAttentionCore(spec.attn_drop, spec.scale)
        self.proj_drop = Dropout(spec.proj_drop) if spec.proj_drop else nn.Identity()
        table = (2 * self.window[0] - 1) * (2 * self.window[1] - 1)
        self.relative_position_bias_table = nn.Parameter(torch.zeros(table, spec.heads))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
        self.register_buffer("relative_position_index", relative_position_index(*self.window), persistent=False)
        shifted = shift != (0, 0)
        order = window_order(grid, self.window, shift) if shifted else None
        self.register_buffer("order", order, persistent=False)
        self.register_buffer("inverse", torch.argsort(order) if shifted else None, persistent=False)
        mask = shift_mask(grid, self.window, shift)[:, None] if shifted else None  # (windows, 1, n, n)
        self.register_buffer("shift_mask", mask, persistent=False)

    no_weight_decay_names = ("relative_position_bias_table",)

    def bias(self) -> torch.Tensor:
        """B: (heads, n, n)."""
        n = self.area
        return self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1).permute(2, 0, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attention within each window of the token grid (shifted, where the spec shifts it)."""
        (nh, nw), (wh, ww) = self.windows, self.window
        if self.order is None:  # the projections on the grid as it is; windows x heads as the heads axis, as shifted
            mask = self.bias().unsqueeze(0).expand(nh * nw, -1, -1, -1).flatten(0, 1).unsqueeze(0)
            x = self.attend(x, "b (nh wh nw ww) (h d) -> b (nh nw h) (wh ww) d",
                            "b (nh nw h) (wh ww) d -> b (nh wh nw ww) (h d)", mask, nh=nh, wh=wh, nw=nw, ww=ww)
        else:  # shifted: gather into windows, windows x heads as the heads axis, scatter back
            x = permute_tokens(x, self.order, self.inverse)
            mask = (self.bias() + self.shift_mask).flatten(0, 1).unsqueeze(0)  # (1, windows x heads, n, n)
            x = self.attend(x, "b (w n) (h d) -> b (w h) n d", "b (w h) n d -> b (w n) (h d)", mask, n=self.area)
            x = permute_tokens(x, self.inverse, self.order)
        return self.proj_drop(x)

    def attend(self, x: torch.Tensor, split: str, merge: str, mask: torch.Tensor, **axes: int) -> torch.Tensor:
        """Projections, the attention core and the output on tokens x (`split` / `merge`: how the windows and heads
        sit in them, `axes` their sizes but the heads'). The projections are per token, so that unshifted windows
        are cut from the projected grid in the split itself and put back in the merge: no copy of x in windows."""
        q, k, v, *extra = self.project(x)
        q, k, v = (rearrange(y, split, h=self.heads, **axes) for y in (q, k, v))
        return self.finish(rearrange(self.core(q, k, v, mask), merge, h=self.heads, **axes), extra)


class PatchMerging(nn.Module):
    """(B, h w, C) -> (B, h/2 w/2, out): each 2x2 neighbourhood's tokens concatenated as timm orders
    them ([(0,0), (1,0), (0,1), (1,1)] as (row, column) offsets), norm over 4C, Linear to the width."""

    def __init__(self, spec: specs.PatchMerging, ctx: BuildContext):
        super().__init__()
        self.grid, c = ctx.grid, ctx.dim  # ctx describes the merging's input; out_dim is the stage's width
        self.norm = make_norm(spec.norm, 4 * c)
        self.reduction = Linear(4 * c, ctx.out_dim, bias=spec.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Each 2x2 neighbourhood concatenated, norm, then the linear reduction."""
        x = rearrange(x, "b (h p1 w p2) c -> b (h w) (p2 p1 c)", h=self.grid[0] // 2, p1=2, p2=2)
        return self.reduction(self.norm(x))
