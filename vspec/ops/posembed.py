"""Fixed sinusoidal position tables."""

import torch


def _sincos(pos: torch.Tensor, dim: int, temperature: float, denom: int) -> torch.Tensor:
    omega = 1.0 / temperature ** (torch.arange(dim, dtype=torch.float64) / denom)
    angles = pos.to(torch.float64)[:, None] * omega[None, :]
    return angles.sin(), angles.cos()


def sincos_1d(length: int, dim: int, temperature: float = 1e4) -> torch.Tensor:
    """Transformer sinusoids (Vaswani et al. 2017): PE[p, 2i] = sin(p / T^(2i/d)),
    PE[p, 2i+1] = cos(p / T^(2i/d)); shape (length, dim)."""
    sin, cos = _sincos(torch.arange(length), dim // 2, temperature, dim // 2)
    return torch.stack((sin, cos), dim=-1).flatten(1).float()


def sincos_2d(h: int, w: int, dim: int, temperature: float = 1e4) -> torch.Tensor:
    """SimpleViT's 2-D table (Beyer et al. 2022), rows in raster order: for each grid cell
    [sin(x w_k), cos(x w_k), sin(y w_k), cos(y w_k)] with w_k = T^(-k / (d/4 - 1)),
    k = 0 .. d/4 - 1; shape (h * w, dim)."""
    quarter = dim // 4
    y, x = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    xs, xc = _sincos(x.flatten(), quarter, temperature, max(quarter - 1, 1))
    ys, yc = _sincos(y.flatten(), quarter, temperature, max(quarter - 1, 1))
    return torch.cat((xs, xc, ys, yc), dim=1).float()
