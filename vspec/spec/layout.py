"""The shape of a model, computed from its spec alone: what every stage's blocks see.

`layout(model)` is the one place that works out widths, token grids and prefix tokens, `received` / `state_layout`
the shapes of the state carried beside the tokens, `assemble(model)` all that building needs (an `Assembly`). The
model's validator, the builder, the profiler and the CLI all read them; nothing else recomputes shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from attrs import frozen

from .._moved import moved as _moved

if TYPE_CHECKING:
    from .model import Model

__all__ = [
    "Assembly", "StageLayout", "StateShape", "Tokens", "assemble", "embedded", "layout", "received", "state_layout",
]


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
        """The grid's tokens, H x W."""
        return self.grid[0] * self.grid[1]

    @property
    def length(self) -> int:
        """The sequence's length: prefix tokens, grid tokens and joined ones."""
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


def received(model: Model, stages: tuple[StageLayout, ...], check: Callable | None = None,
             every: bool = True) -> list[dict[str, Any]]:
    """The state each block receives, in order over all stages, then the state after the last block: every key
    written before it (the embedder's `state`, each block's `state_out`), shapes by key. The one walk of the carried
    state: `check(shape, index_in_stage, block, state)`, when given, runs on each block before what it writes is
    worked out (the validator's rules). `every=False` walks a repeated block only until the state it hands on stops
    changing (the same block on the same state adds nothing: the validator's walk, a few steps for a 2**31-deep
    stage); the list then holds the states walked.

    Args:
        model: the model spec.
        stages: its stages' layouts (`layout(model)`).
        check: called as `check(shape, index_in_stage, block, state)` on each block (None: no check).
        every: walk every block of a repeated stage; False: until the state stops changing.
    """
    state, out = dict(model.embedder.state(model.img_size)), []
    for stage, shape in zip(model.stages, stages):
        repeated = not isinstance(stage.block, tuple)
        for j in range(stage.depth):
            block = stage.block if repeated else stage.block[j]
            out.append(state)
            if check is not None:
                check(shape, j, block, state)
            state, before = {**state, **block.state_out(state, shape.tokens)}, state
            if repeated and not every and state == before:
                break
    return [*out, state]


def state_layout(model: Model, stages: tuple[StageLayout, ...] | None = None) -> tuple[dict[str, Any], ...]:
    """The carried state beside the tokens (`vspec.nn.blocks.Carry`): the shape of each key that each block receives,
    in order over all stages, then what the head receives. The embedder starts keys (`state`), a block writes keys
    (`state_out`) and hands on the others as they came (`received`); a key is carried from where it is written to the
    last part that reads it (kinds' `reads`; the model's own training output: `Model.attention_maps` keeps the blocks'
    maps, their `maps_key`, to the end), and dropped after. () keys for a body that carries nothing.

    Args:
        model: the model spec.
        stages: its stages' layouts (None: `layout(model)`, worked out here).
    """
    written = received(model, layout(model) if stages is None else stages)
    maps = {b.maps_key for b in model.blocks} - {None} if model.attention_maps else set()  # the training output's
    kept = {*model.head.reads, *maps}  # read after the last block
    live, out = kept, [{k: v for k, v in written[-1].items() if k in kept}]
    for block, before in zip(reversed(model.blocks), reversed(written[:-1])):
        live = (live - set(block.writes)) | set(block.reads) | maps
        out.append({k: v for k, v in before.items() if k in live})
    return tuple(reversed(out))


@frozen(eq=False)
class Assembly:
    """What building a model needs of its shapes, worked out once from its spec (`assemble`) and handed down by the
    model's module to its stages: the tokens after the embedder (`tokens`), each stage's layout (`stages`), the state
    each block and then the head receives (`state`, `state_layout`), the keys each block hands on (`hands_on`: those
    it reads or writes that a later part reads), and which parts compute the same thing (`keys` per block,
    `entry_keys` per stage, None without an entry): equal keys for one spec on the same tokens with one variant (a
    window shift's parity), the same state read and handed on. The tied model (the profiler's) builds one module per
    key; the profiler counts each key once."""

    tokens: Tokens
    stages: tuple[StageLayout, ...]
    state: tuple[dict[str, Any], ...]
    hands_on: tuple[frozenset[str], ...]
    keys: tuple[Hashable, ...]
    entry_keys: tuple[Hashable | None, ...]


def assemble(model: Model) -> Assembly:
    """The model's `Assembly`: its layout, its state layout, what each block hands on, the parts' keys.

    Args:
        model: the model spec.
    """
    stages = layout(model)
    state = state_layout(model, stages)
    hands_on, keys = [], []
    for shape in stages:
        for j, block in enumerate(model.stages[shape.index].blocks):
            got, after = state[shape.first + j], state[shape.first + j + 1]
            hands = frozenset(k for k in after if k in block.reads or k in block.writes)
            hands_on.append(hands)
            keys.append(("block", shape.tokens, block, block.variant(shape.tokens, j), hands,
                         tuple((k, got[k]) for k in block.reads)))
    entry_keys = tuple(None if s.entry is None else ("entry", s.entry, shape.entry_in, shape.tokens.dim)
                       for s, shape in zip(model.stages, stages))
    return Assembly(embedded(model), stages, state, tuple(hands_on), tuple(keys), entry_keys)


def embedded(model: Model) -> Tokens:
    """The tokens after the embedder, class token and position embedding: the first stage's input.

    Args:
        model: the model spec.
    """
    return Tokens(model.stages[0].dim, model.embedder.grid(model.img_size), int(model.class_token),
                  sequence=model.embedder.text)


def layout(model: Model) -> tuple[StageLayout, ...]:
    """Every stage's layout, in order. Pure arithmetic: never fails, even on a spec that the model's
    validator will reject (which is how the validator can use it).

    Args:
        model: the model spec.
    """
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
