"""Normalisation layer spec, used by blocks, embedders and heads."""

from typing import Literal

from attrs import field, frozen

from .core import check

NORM_KINDS = ("layernorm", "none")


@frozen
class Norm:
    """A normalisation over the channel axis. `none` is the identity."""

    kind: Literal["layernorm", "none"] = field(default="layernorm", validator=check(str, choices=NORM_KINDS))
    eps: float = field(default=1e-6, validator=check(float, gt=0))
