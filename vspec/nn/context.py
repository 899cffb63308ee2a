"""What a module needs to know beyond its own spec, handed down by the compiler."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from torch import nn

from ..spec import Tokens

__all__ = ["BuildContext"]


@dataclass(frozen=True)
class BuildContext:
    """What building one component needs beyond its own spec (the model's module hands it down from the spec's
    `vspec.spec.Assembly`; each part passes a changed copy to its children, `child`).

    What the component receives: `tokens` (width, token grid, prefix tokens), `in_shape` (its per-sample shape when
    that is not tokens: a head's normalisation receives the pooled representation), `state` (the shapes of the
    carried state it receives, by key: vspec.spec.state_layout). What it makes: `out_dim` (the width, for a component
    that changes it: a stage's entry), `num_classes` (a head's classifier width). Its place: `in_chans` (the image
    channels, the embedder's), `index_in_stage` (a window shift alternates with it), `drop_path` (the block's
    stochastic-depth rate), `hands_on` (the keys the block reads or writes that a later part reads: it hands them on;
    the others it drops, or need not compute). `build`: the compiler, to build child specs.
    """

    tokens: Tokens
    in_chans: int
    num_classes: int
    build: Callable[[Any, "BuildContext"], nn.Module]
    index_in_stage: int = 0
    drop_path: float = 0.0
    out_dim: int | None = None
    in_shape: tuple[int, ...] = ()
    state: Mapping[str, Any] = field(default_factory=dict)
    hands_on: frozenset[str] = frozenset()

    @property
    def dim(self) -> int:
        """The width of the tokens the part reads."""
        return self.tokens.dim

    @property
    def grid(self) -> tuple[int, int]:
        """The token grid the part reads."""
        return self.tokens.grid

    @property
    def num_prefix_tokens(self) -> int:
        """The tokens before the grid's (the class token)."""
        return self.tokens.prefix

    def child(self, spec: Any, **changes: Any) -> nn.Module:
        """The module of a child spec, built in this context with `changes` (tokens, ...)."""
        ctx = replace(self, **changes) if changes else self
        return self.build(spec, ctx)
