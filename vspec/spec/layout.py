"""The shape of a model, computed from its spec alone: what every stage's blocks see.

`layout(model)` is the one place that works out widths, token grids and prefix tokens. The model's
validator, the build context, the profiler and the CLI all read it; nothing else recomputes shapes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    from .model import Model


@frozen
class Tokens:
    """What a component receives: `prefix` tokens (the class token) and then one token per cell of a
    `grid` (height, width) in raster order, each `dim` wide; then `joined` tokens that join for this
    component alone (DHVT's head tokens in the attention of their block; never in a stage's layout).
    `sequence`: the tokens are a text sequence (grid (1, L)), not an image's grid."""

    dim: int
    grid: tuple[int, int]
    prefix: int = 0
    joined: int = 0
    sequence: bool = False

    @property
    def patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def length(self) -> int:
        return self.prefix + self.patches + self.joined

    def __str__(self) -> str:
        extra = "".join(f" + {n}" for n in (self.prefix, self.joined) if n)
        if self.sequence:
            return f"{self.grid[1]}{extra} tokens x {self.dim}"
        return f"{self.grid[0]}x{self.grid[1]}{extra} tokens x {self.dim}"


@frozen
class StageLayout:
    """One stage: its entry turns `entry_in` (None without an entry) into `tokens`, which its `depth`
    blocks keep. `first` is the global index of its first block; `reduction` is the image stride of
    its tokens (pixels per token side, timm's feature_info)."""

    index: int
    tokens: Tokens
    entry_in: Tokens | None
    depth: int
    first: int
    reduction: int


@frozen
class ConvMap:
    """A two-branch body's CNN map (Conformer): `chans` channels on a `grid` (height, width)."""

    chans: int
    grid: tuple[int, int]

    def __str__(self) -> str:
        return f"{self.grid[0]}x{self.grid[1]} map x {self.chans}"


def conv_layout(model: Model) -> tuple[ConvMap, ...]:
    """A two-branch body's CNN maps: the one each block receives, in order, then the one the head reads; () for
    a one-branch body. A coupled block changes the map (its `map_output`), any other hands it on."""
    if not model.embedder.two_branch:
        return ()
    out = [model.embedder.map(model.img_size)]
    for block in model.blocks:
        out.append(block.map_output(out[-1]))
    return tuple(out)


def embedded(model: Model) -> Tokens:
    """The tokens after the embedder, class token and position embedding: the first stage's input."""
    return Tokens(model.stages[0].dim, model.embedder.grid(model.img_size), int(model.class_token),
                  sequence=model.embedder.text)


def layout(model: Model) -> tuple[StageLayout, ...]:
    """Every stage's layout, in order. Pure arithmetic: never fails, even on a spec that the model's
    validator will reject (which is how the validator can use it)."""
    tokens, reduction, first, out = embedded(model), model.embedder.patch_size, 0, []
    for i, stage in enumerate(model.stages):
        entry_in = None
        if stage.entry is not None:
            entry_in = tokens
            tokens = stage.entry.output(tokens, stage.dim)
            reduction *= stage.entry.stride
        else:
            tokens = Tokens(stage.dim, tokens.grid, tokens.prefix, sequence=tokens.sequence)
        out.append(StageLayout(i, tokens, entry_in, stage.depth, first, reduction))
        first += stage.depth
    return tuple(out)
