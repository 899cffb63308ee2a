"""The functional core: pure tensor functions without parameters, each citing its equation."""

from .linear import linear
from .posembed import sincos_1d, sincos_2d

__all__ = ["linear", "sincos_1d", "sincos_2d"]
