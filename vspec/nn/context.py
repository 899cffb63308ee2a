"""What a module needs to know beyond its own spec, handed down by the compiler."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from torch import nn

from ..spec import Tokens


@dataclass(frozen=True)
class BuildContext:
    """Context values for building one component.

    tokens: what the component receives (width, token grid, prefix tokens), from the spec's layout.
    in_chans: image channels. num_classes: classifier width (heads). index_in_stage: the position of
    the block being built in its stage (a window shift alternates with it). drop_path: this block's
    stochastic-depth rate.
    out_dim: the width to produce, for a component that changes it (a stage's entry).
    in_shape: per-sample shape of what the component receives when that is not tokens (a head's
    normalisation receives the pooled representation). build: the compiler, to build child specs.
    tie_repeats: build one module per distinct block (or entry) of the model and repeat it, in its
    stage and in others (weights tied): the profiler's model, whose cost grows with the distinct
    parts, not with the depth or the number of stages.
    state: the shapes of the carried state that the block (or the head) receives, by key
    (vspec.spec.state_layout). hands_on: the keys the block reads or writes that a later part reads (it hands them
    on; the others it drops, or need not compute).
    """

    tokens: Tokens
    in_chans: int
    num_classes: int
    build: Callable[[Any, "BuildContext"], nn.Module]
    index_in_stage: int = 0
    drop_path: float = 0.0
    out_dim: int | None = None
    in_shape: tuple[int, ...] = ()
    tie_repeats: bool = False
    state: Mapping[str, Any] = field(default_factory=dict)
    hands_on: frozenset[str] = frozenset()

    @property
    def dim(self) -> int:
        return self.tokens.dim

    @property
    def grid(self) -> tuple[int, int]:
        return self.tokens.grid

    @property
    def num_prefix_tokens(self) -> int:
        return self.tokens.prefix

    def child(self, spec: Any, **changes: Any) -> nn.Module:
        ctx = replace(self, **changes) if changes else self
        return self.build(spec, ctx)
