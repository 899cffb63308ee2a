"""The functional core: pure tensor functions without parameters, each citing its equation."""

from .linear import linear
from .posembed import sincos_1d, sincos_2d
from .covariance import covariance, cross_covariance
from .isqrt import isqrt_cov
from .svpn import epn, power_iteration, svpn_approx, svpn_exact

__all__ = ["linear", "sincos_1d", "sincos_2d", "covariance", "cross_covariance", "isqrt_cov", "epn",
           "power_iteration", "svpn_approx", "svpn_exact"]
