"""The functional core: pure tensor functions without parameters, each citing its equation. One file
per paper: `vit.py` (the generic linear kernel, sin-cos tables), `sot.py`, `swin.py`, `msf.py`; `precision.py`
keeps SoT's numerically sensitive functions in float32 under autocast; `fast.py` is the one switch of the CPU
fast paths."""

from .msf import gaussian_attention, gaussian_attention_sdpa, gaussian_channels, grouped_linear, structured
from .sot import covariance, cross_covariance, epn, isqrt_cov, power_iteration, svpn_approx, svpn_exact
from .swin import permute_tokens, relative_position_index, shift_mask, window_order
from .vit import linear, sincos_1d, sincos_2d

__all__ = ["linear", "sincos_1d", "sincos_2d", "covariance", "cross_covariance", "isqrt_cov", "epn",
           "power_iteration", "svpn_approx", "svpn_exact", "permute_tokens", "relative_position_index", "shift_mask",
           "window_order", "gaussian_attention", "gaussian_attention_sdpa", "gaussian_channels", "grouped_linear",
           "structured"]
