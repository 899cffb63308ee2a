"""The functional core: pure tensor functions without parameters, each citing its equation."""

from .posembed import sincos_1d, sincos_2d

__all__ = ["sincos_1d", "sincos_2d"]
