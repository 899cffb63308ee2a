"""Swin's index arithmetic (Liu et al. 2021, Sec. 3.2): relative positions inside a window, the window
order of a (shifted) grid, and the mask of the shifted windows. Integer tensors, computed once per
module."""

import torch

__all__ = ["permute_tokens", "relative_position_index", "shift_mask", "window_order"]


def relative_position_index(wh: int, ww: int) -> torch.Tensor:
    """(n, n) with n = wh * ww: for query i and key j of a window (raster order), the row of the
    ((2 wh - 1) (2 ww - 1), heads) bias table holding B for their offset (dy, dx) = pos_i - pos_j:
    (dy + wh - 1) (2 ww - 1) + (dx + ww - 1).

    Args:
        wh: the window's height, in tokens.
        ww: its width.
    """
    y, x = torch.meshgrid(torch.arange(wh), torch.arange(ww), indexing="ij")
    y, x = y.flatten(), x.flatten()
    return (y[:, None] - y[None, :] + wh - 1) * (2 * ww - 1) + (x[:, None] - x[None, :] + ww - 1)


def window_order(grid: tuple[int, int], window: tuple[int, int], shift: tuple[int, int]) -> torch.Tensor:
    """(h * w,): the token (raster index of the unshifted grid) at each position of the windowed
    sequence. The grid is cyclically shifted by -shift (torch.roll), then cut into windows, windows in
    raster order and the tokens of each window in raster order: `x[:, order]` is `x` in windows.

    Args:
        grid: the token grid (h, w).
        window: the window (wh, ww), dividing the grid.
        shift: the cyclic shift (sh, sw); (0, 0) for none.
    """
    (h, w), (wh, ww), (sh, sw) = grid, window, shift
    y = (torch.arange(h).view(h // wh, wh) + sh) % h  # shifted row r reads row r + shift
    x = (torch.arange(w).view(w // ww, ww) + sw) % w
    return (y[:, None, :, None] * w + x[None, :, None, :]).flatten()


def _regions(size: int, window: int, shift: int) -> torch.Tensor:
    """Swin's labels along one axis of the shifted grid: the slices [0, -window), [-window, -shift),
    [-shift, end) hold tokens that were not neighbours before the roll."""
    label = torch.zeros(size, dtype=torch.long)
    if shift:
        label[size - window:] = 1
        label[size - shift:] = 2
    return label


def shift_mask(grid: tuple[int, int], window: tuple[int, int], shift: tuple[int, int],
               masked: float = -100.0) -> torch.Tensor:
    """(windows, n, n) additive attention mask of the shifted windows: 0 between tokens of one region,
    `masked` (Swin's -100, which softmax turns into ~4e-44) between tokens the roll made neighbours.

    Args:
        grid: the token grid (h, w).
        window: the window (wh, ww).
        shift: the cyclic shift (sh, sw).
        masked: the additive value between tokens of different regions.
    """
    (h, w), (wh, ww) = grid, window
    region = _regions(h, wh, shift[0])[:, None] * 3 + _regions(w, ww, shift[1])[None, :]
    per_window = region.view(h // wh, wh, w // ww, ww).permute(0, 2, 1, 3).reshape(-1, wh * ww)
    return (per_window[:, :, None] != per_window[:, None, :]).float() * masked


class _PermuteTokens(torch.autograd.Function):
    """x[:, order] for a permutation `order` of the tokens; the gradient is the inverse gather,
    grad[:, inverse] (index_select's own backward would zero-fill and scatter-add)."""

    @staticmethod
    def forward(ctx, x, order, inverse):
        ctx.save_for_backward(inverse)
        return x.index_select(1, order)

    @staticmethod
    def backward(ctx, grad):
        (inverse,) = ctx.saved_tensors
        return grad.index_select(1, inverse), None, None


def permute_tokens(x: torch.Tensor, order: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    """(B, N, C) -> (B, N, C) with token i = x[:, order[i]]; `inverse` = argsort(order).

    Args:
        x: the tokens (B, N, C).
        order: the permutation (N,).
        inverse: its inverse, argsort(order).
    """
    if torch.jit.is_tracing():  # fvcore's trace: the plain gather, whose op it counts (as 0)
        return x.index_select(1, order)
    return _PermuteTokens.apply(x, order, inverse)
