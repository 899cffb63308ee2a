"""Resampling the tables that follow the token grid, as pure tensor functions (the rules: vspec/weights/resample.py's
doc): the learned absolute position table `pos_embed`, bicubic over the patch grid with the prefix (class) rows kept,
as DeiT's released fine-tuning at 384 px (facebookresearch/deit, main.py) and timm's `resample_abs_pos_embed(...,
antialias=False)`; Swin's relative position bias tables, bicubic over the (2 wh - 1) x (2 ww - 1) offsets, as Swin's
released `load_pretrained` (microsoft/Swin-Transformer, utils.py) and timm's `resize_rel_pos_bias_table_simple`."""

import torch
import torch.nn.functional as F
from einops import rearrange

__all__ = ["resample_bias_table", "resample_pos_embed"]


def _bicubic(grid: torch.Tensor, size: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """(1, c, h, w) -> (1, c, *size) bicubic (align_corners false, no antialias), in float32 at least, as `dtype`."""
    work = grid if grid.dtype == torch.float64 else grid.float()
    return F.interpolate(work, size=tuple(size), mode="bicubic", align_corners=False).to(dtype)


def resample_pos_embed(table: torch.Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int],
                       prefix: int) -> torch.Tensor:
    """(1, prefix + old h w, d) -> (1, prefix + new h w, d): the patch rows bicubic over the grid, the prefix
    rows as they are. Computed in float32 at least (interpolate's bicubic), returned in the table's dtype.

    Args:
        table: the position table (1, prefix + h w, d).
        old_grid: the table's grid (h, w).
        new_grid: the grid resampled to.
        prefix: its rows of prefix tokens (class token), kept.
    """
    if tuple(old_grid) == tuple(new_grid):
        return table
    head, patches = table[:, :prefix], table[:, prefix:]
    grid = rearrange(patches, "o (h w) d -> o d h w", h=old_grid[0], w=old_grid[1])
    grid = _bicubic(grid, new_grid, table.dtype)
    return torch.cat((head, rearrange(grid, "o d h w -> o (h w) d")), dim=1)


def resample_bias_table(table: torch.Tensor, old_window: tuple[int, int], new_window: tuple[int, int]) -> torch.Tensor:
    """((2 wh - 1)(2 ww - 1), heads) of one window -> of another: bicubic over the table of offsets.

    Args:
        table: the bias table ((2 wh - 1)(2 ww - 1), heads).
        old_window: its window (wh, ww).
        new_window: the window resampled to.
    """
    if tuple(old_window) == tuple(new_window):
        return table
    old, new = (tuple(2 * w - 1 for w in win) for win in (old_window, new_window))
    grid = rearrange(table, "(a b) h -> 1 h a b", a=old[0], b=old[1])
    grid = _bicubic(grid, new, table.dtype)
    return rearrange(grid, "1 h a b -> (a b) h")
