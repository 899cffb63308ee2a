"""MixToken (LV-ViT, Jiang et al. 2021, "All tokens matter"; Refiner's released training): in the training forward
that asks for the head's outputs (`Transformer.set_training_outputs`; a plain `model(x)` never mixes a batch) a
box of the embedder's token grid is taken from the batch-flipped sample (sample b gets sample B - 1 - b's tokens
there), before the class token and the position embedding; the head swaps its token logits back in the box, so
that each token is scored against its own image's token label, and the class target is mixed by the box's share
(`vspec.nn.head_outputs.head_loss`). As released (fixtures README, "Token labeling", MixToken), with beta = 1.

The box is drawn from Python's `random` (`draw_box`: no tensor is made or read, so the step reads nothing back from
the device, and numpy's global state is left alone); `released_draw_box` is the released draw from numpy's legacy
global stream, for reproducing the release."""

import random
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

__all__ = ["BoxDraw", "TokenBox", "draw_box", "released_draw_box", "swap_box"]


class TokenBox(NamedTuple):
    """Rows r1:r2 and columns c1:c2 of a `grid` (Hp, Wp) of tokens in raster order: the box MixToken swapped."""

    r1: int
    c1: int
    r2: int
    c2: int
    grid: tuple[int, int]

    @property
    def corners(self) -> tuple[int, int, int, int]:
        """(r1, c1, r2, c2): the released model's box (`vspec.nn.token_losses` take it)."""
        return self.r1, self.c1, self.r2, self.c2

    @property
    def lam(self) -> float:
        """The share of its own tokens each sample keeps: 1 - box area / N (the released loss's, not the drawn lam)."""
        return 1.0 - (self.r2 - self.r1) * (self.c2 - self.c1) / (self.grid[0] * self.grid[1])


def draw_box(grid: tuple[int, int], rng: random.Random | None = None) -> TokenBox:
    """lam ~ Beta(1, 1) = U(0, 1), then the row centre, then the column centre, uniform over the grid, from `rng`
    (else Python's global `random`, whose state vspec's checkpoints save and restore, so a resumed run draws the same
    boxes); the box as the release cuts it (`_box`).

    Args:
        grid: the token grid (rows, columns).
        rng: the generator (None: Python's global `random`).
    """
    draw = rng or random  # the module's functions: its global generator
    hp, wp = grid
    return _box(grid, draw.random(), draw.randrange(hp), draw.randrange(wp))


def released_draw_box(grid: tuple[int, int]) -> TokenBox:
    """The released draw: lam ~ Beta(1, 1), then the row centre, then the column centre, from numpy's legacy global
    generator in that order (it moves the caller's numpy state: for reproducing the release, e.g.
    `model.set_training_outputs(True, draw=released_draw_box)` after `np.random.seed(...)`).

    Args:
        grid: the token grid (rows, columns).
    """
    hp, wp = grid
    lam = np.random.beta(1.0, 1.0)
    return _box(grid, lam, np.random.randint(hp), np.random.randint(wp))


def _box(grid: tuple[int, int], lam: float, row: int, col: int) -> TokenBox:
    """cut = int(side x sqrt(1 - lam)) per axis, the box [centre - cut // 2, centre + cut // 2) clipped to the grid."""
    hp, wp = grid
    cut_r, cut_c = int(hp * np.sqrt(1.0 - lam)), int(wp * np.sqrt(1.0 - lam))
    r1, r2 = (int(np.clip(row + d, 0, hp)) for d in (-(cut_r // 2), cut_r // 2))
    c1, c2 = (int(np.clip(col + d, 0, wp)) for d in (-(cut_c // 2), cut_c // 2))
    return TokenBox(r1, c1, r2, c2, (hp, wp))


BoxDraw = Callable[[tuple[int, int]], TokenBox]  # grid -> box: draw_box, released_draw_box or the caller's own


def swap_box(x: torch.Tensor, box: TokenBox) -> torch.Tensor:
    """`x` (B, Hp * Wp, ...) with the box's tokens taken from x.flip(0): the mixing, and (applied again) its undoing.

    Args:
        x: the tokens (B, Hp * Wp, ...).
        box: the MixToken box.
    """
    hp, wp = box.grid
    if x.shape[1] != hp * wp:
        raise ValueError(f"MixToken: {x.shape[1]} tokens do not lie on the {hp}x{wp} grid of the box")
    inside = torch.zeros(hp, wp, dtype=torch.bool, device=x.device)
    inside[box.r1:box.r2, box.c1:box.c2] = True
    return torch.where(inside.view(1, hp * wp, *(1,) * (x.dim() - 2)), x.flip(0), x)
