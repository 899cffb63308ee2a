"""Cross-covariance of two token sets (SoT Eq. 2-3).

The paper stores tokens as columns (X = W Z is m x q, Y = R Z is n x q) and writes Q = (1/q) X Y^T.
vspec keeps tokens as rows, so x is (..., N, m), y is (..., N, n) and Q = (1/N) x^T y, (..., m, n).

Centering (applied to x and y separately, per sample):
- "none": no centering, exactly the paper's formula;
- "scalar": subtract the single mean of all N*m entries of x (and of all N*n entries of y); this is
  what SoT's released code does before the product;
- "channel": subtract the per-channel mean over the N tokens, the classical (cross-)covariance.
"""

import torch

CENTERINGS = ("none", "scalar", "channel")


def _center(x: torch.Tensor, centering: str) -> torch.Tensor:
    if centering == "none":
        return x
    if centering == "scalar":
        return x - x.mean(dim=(-2, -1), keepdim=True)
    if centering == "channel":
        return x - x.mean(dim=-2, keepdim=True)
    raise ValueError(f"centering: must be one of {', '.join(map(repr, CENTERINGS))}, got {centering!r}")


def cross_covariance(x: torch.Tensor, y: torch.Tensor, centering: str = "scalar") -> torch.Tensor:
    """Q = (1/N) Xc^T Yc (SoT Eq. 2-3, Q = (1/q) X Y^T in the paper's column layout); x (..., N, m),
    y (..., N, n) -> (..., m, n). `centering` is "none" | "scalar" | "channel" (module docstring)."""
    if x.shape[-2] != y.shape[-2]:
        raise ValueError(f"x and y must have the same number of tokens, got {x.shape[-2]} and {y.shape[-2]}")
    xc, yc = _center(x, centering), _center(y, centering)
    return xc.transpose(-2, -1) @ yc / x.shape[-2]


def covariance(x: torch.Tensor, centering: str = "channel") -> torch.Tensor:
    """(1/N) Xc^T Xc for x (..., N, m) -> (..., m, m): `cross_covariance(x, x, centering)`; with the
    default "channel" centering the classical (biased) covariance that GCP / iSQRT-COV pools."""
    return cross_covariance(x, x, centering)
