"""The shape of a model, computed from its spec alone: what every stage's blocks see.

`layout(model)` is the one place that works out widths, token grids and prefix tokens, `state_layout(model)` the
shapes of the state carried beside the tokens. The model's validator, the build context, the profiler and the CLI
all read them; nothing else recomputes shapes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attrs import frozen

from .._moved import moved as _moved

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
class StateShape:
    """The per-sample `shape` of one carried state (the batch axis left out), and how the tables show it (`label`;
    the shape itself by default). A family may use its own frozen class with a `shape` (Conformer's ConvMap)."""

    shape: tuple[int, ...]
    label: str = ""

    def __str__(self) -> str:
        return self.label or "x".join(map(str, self.shape))


def state_layout(model: Model) -> tuple[dict[str, Any], ...]:
    """The carried state beside the tokens (`vspec.nn.blocks.Carry`): the shape of each key that each block receives,
    in order over all stages, then what the head receives. The embedder starts keys (`state`), a block writes keys
    (`state_out`) and hands on the others as they came; a key is carried from where it is written to the last part
    that reads it (kinds' `reads`; the model's own training output: `Model.attention_maps` keeps the blocks' maps,
    their `maps_key`, to the end), and dropped after. () keys for a body that carries nothing."""
    written, state = [], dict(model.embedder.state(model.img_size))
    blocks = [(b, s.tokens) for s in layout(model) for b in model.stages[s.index].blocks]
    for block, tokens in blocks:
        written.append(state)
        state = {**state, **block.state_out(state, tokens)}
    written.append(state)
    maps = {b.maps_key for b, _ in blocks} - {None} if model.attention_maps else set()  # read by the training output
    kept = {*model.head.reads, *maps}  # read after the last block
    live, out = kept, [{k: v for k, v in state.items() if k in kept}]
    for (block, _), before in zip(reversed(blocks), reversed(written[:-1])):
        live = (live - set(block.writes)) | set(block.reads) | maps
        out.append({k: v for k, v in before.items() if k in live})
    return tuple(reversed(out))


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


def __getattr__(name: str):  # the previous release's names (vspec/_moved.py)
    return _moved(__name__, name)
