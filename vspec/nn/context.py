"""What a module needs to know beyond its own spec, handed down by the compiler."""

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from torch import nn


@dataclass(frozen=True)
class BuildContext:
    """Context values for building one component.

    dim: token width. in_chans: image channels. grid: (height, width) of the patch-token grid, for
    components that work on the image layout of the tokens. num_prefix_tokens: tokens before the
    patch tokens (class token).
    index / depth: position of the block being built. drop_path: this block's stochastic-depth rate.
    num_classes: classifier width (heads). build: the compiler, to build child component specs.
    in_shape: per-sample shape of what the component receives when that is not tokens (a head's
    normalisation receives the pooled representation).
    """

    dim: int
    in_chans: int
    grid: tuple[int, int]
    num_prefix_tokens: int
    depth: int
    num_classes: int
    build: Callable[[Any, "BuildContext"], nn.Module]
    index: int = 0
    drop_path: float = 0.0
    in_shape: tuple[int, ...] = ()

    def child(self, spec: Any, **changes: Any) -> nn.Module:
        ctx = replace(self, **changes) if changes else self
        return self.build(spec, ctx)
