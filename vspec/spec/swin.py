"""Swin (Liu et al., "Swin Transformer: hierarchical vision transformer using shifted windows"):
window attention with relative position bias and shifted windows, and patch merging between stages."""

from typing import ClassVar

from attrs import field, frozen

from .errors import SpecError, check, check_size
from .kinds import EntryKind
from .layout import Tokens
from .vit import ZERO_GRADIENTS, MultiHead, Norm

__all__ = ["PatchMerging", "WindowMHSA"]
_SWIN_NORM = Norm(eps=1e-5)  # torch's LayerNorm default, as Swin uses


@frozen
class WindowMHSA(MultiHead):
    """(Shifted) window multi-head self-attention (Swin Eq. 4): softmax(q k^T * scale + B) v within
    each `window` x `window` window of the grid, B from a learnable relative position bias table
    ((2 window - 1)^2 entries per head). With `shift`, every second block of a stage (odd index in the
    stage) first rolls the grid by window // 2 and masks the pairs that the roll brought together.
    The other fields are MHSA's (MultiHead).

    A window larger than the grid is clamped to the grid (per axis), and an axis that fits in one
    window is not shifted, as Swin does. The grid must be a multiple of the (clamped) window, and a
    window must hold at least 2 tokens (`check_keys`)."""

    kind: ClassVar[str] = "window_mhsa"
    needs_grid: ClassVar[bool] = True  # windows of the image grid
    window: int = field(default=7, validator=check(int, ge=1))
    shift: bool = field(default=True, validator=check(bool))

    def window_size(self, grid: tuple[int, int]) -> tuple[int, int]:
        """The window on a `grid`: `window`, cut to the grid where the grid is smaller."""
        return (min(self.window, grid[0]), min(self.window, grid[1]))

    def shift_size(self, grid: tuple[int, int], index_in_stage: int) -> tuple[int, int]:
        """The cyclic shift of the block at `index_in_stage` (0 on axes that fit in one window)."""
        if not self.shift or index_in_stage % 2 == 0:
            return (0, 0)
        return tuple(self.window // 2 if g > self.window else 0 for g in grid)

    def variant(self, tokens: Tokens, index_in_stage: int) -> tuple[int, int]:
        """What distinguishes blocks of one stage built from this spec: their shift."""
        return self.shift_size(tokens.grid, index_in_stage)

    def scores(self, tokens: Tokens) -> int:
        """Per window: heads x window tokens x window tokens."""
        wh, ww = self.window_size(tokens.grid)
        return self.heads * tokens.length * wh * ww

    def check(self, tokens: Tokens) -> None:
        """SpecError with a class token, heads that do not fit (`MultiHead.check`) or a window not dividing the grid."""
        if tokens.prefix:
            raise SpecError("", "window attention partitions the token grid; a class token has no place in it "
                                "(set class_token = false)")
        MultiHead.check(self, tokens)
        window = self.window_size(tokens.grid)
        if tokens.grid[0] % window[0] or tokens.grid[1] % window[1]:
            raise SpecError("window", f"{self.window} does not divide the {tokens.grid[0]}x{tokens.grid[1]} token grid")

    def check_keys(self, tokens: Tokens) -> None:
        """At least 2 tokens per window (MultiHead's rule, within a window): else the relative position
        bias table, too, would only ever get zero gradients."""
        if self.window == 1:
            raise SpecError("window", f"1 token per window: nothing to attend, {ZERO_GRADIENTS} (and the "
                                      "relative position bias too)")
        window = self.window_size(tokens.grid)
        if window == (1, 1):
            raise SpecError("", f"the {tokens.grid[0]}x{tokens.grid[1]} token grid clamps the window to 1 token: "
                                f"nothing to attend, {ZERO_GRADIENTS} (and the relative position bias too)")


@frozen
class PatchMerging(EntryKind):
    """Swin's downsampling between stages: concatenate each 2x2 neighbourhood of tokens (4C channels),
    `norm`, then a Linear 4C -> the stage's width (2C in Swin; no bias)."""

    kind: ClassVar[str] = "patch_merging"
    needs_grid: ClassVar[bool] = True  # 2x2 neighbours on the image grid
    stride: ClassVar[int] = 2
    norm: Norm = field(default=_SWIN_NORM, validator=check(Norm))
    bias: bool = field(default=False, validator=check(bool))

    def output(self, tokens: Tokens, dim: int) -> Tokens:
        """The tokens after merging: the grid divided by `stride`, at width `dim`."""
        return Tokens(dim, (tokens.grid[0] // self.stride, tokens.grid[1] // self.stride), tokens.prefix)

    def check(self, tokens: Tokens) -> None:
        """SpecError with a class token, or a grid `stride` does not divide."""
        if tokens.prefix:
            raise SpecError("", "patch merging concatenates 2x2 neighbourhoods of the grid; a class token cannot "
                                "pass through it (set class_token = false)")
        if tokens.grid[0] % self.stride or tokens.grid[1] % self.stride:
            raise SpecError("", f"needs an even token grid, got {tokens.grid[0]}x{tokens.grid[1]}")
        check_size("", 4 * tokens.dim, f"the merged width 4 x {tokens.dim}")
