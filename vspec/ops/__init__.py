"""The functional core: pure tensor functions without parameters, each citing its equation: `vit.py` (the generic
linear kernel, sin-cos tables, grouped projections), `swin.py` (windows), `resample.py` (tables at another grid);
`precision.py` keeps numerically sensitive functions in float32 under autocast; `attention.py` is the one entry of
softmax(q k^T) v (SDPA, or its bf16 training path on the CPU); `dropout.py` draws dropout's keep mask faster on the
CPU; `fast.py` is the one switch of the CPU fast paths.
A paper's own functions are in its family's folder (`vspec/models/<family>/ops.py`)."""

from .._moved import moved as _moved
from .swin import permute_tokens, relative_position_index, shift_mask, window_order
from .vit import grouped_linear, linear, sincos_1d, sincos_2d, structured

__all__ = [
    "grouped_linear", "linear", "permute_tokens", "relative_position_index", "shift_mask", "sincos_1d", "sincos_2d",
    "structured", "window_order",
]


def __getattr__(name: str):  # the previous release's names (vspec/_moved.py)
    return _moved(__name__, name)
