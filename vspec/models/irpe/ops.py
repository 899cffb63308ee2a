"""iRPE's arithmetic (Wu et al. 2021, "Rethinking and Improving Relative Position Encoding for Vision
Transformer"): the piecewise index g(x) (Eq. 18), the product method's buckets over a 2-D grid (Sec. 3.3),
and the contextual mode's terms (Eq. 13-16) computed from a lookup of (B, H, N, buckets) values."""

import math

import torch

__all__ = ["contextual_bias", "contextual_values", "piecewise_index", "product_buckets"]


def piecewise_index(d: torch.Tensor, alpha: float, beta: float, gamma: float) -> torch.Tensor:
    """Eq. 18, per axis: [d] (rounded) where |d| <= alpha, else sign(d) min(beta, [alpha + ln(|d| / alpha) /
    ln(gamma / alpha) (beta - alpha)]); the result truncated to an integer (as released: a clip at beta 3.8
    truncates to 3).

    Args:
        d: relative positions along one axis.
        alpha: the exact range's bound.
        beta: the largest index.
        gamma: the distance mapped to beta.
    """
    d = d.double()
    far = alpha + torch.log(d.abs().clamp(min=alpha) / alpha) / math.log(gamma / alpha) * (beta - alpha)
    out = torch.where(d.abs() <= alpha, d.round(), d.sign() * far.round().clamp(max=beta))
    return out.trunc().long()


def product_buckets(grid: tuple[int, int], prefix: int, joined: int, alpha: float, beta: float,
                    gamma: float) -> torch.Tensor:
    """(N, N), N = prefix + h w + joined: the bucket of query i and key j. Grid tokens: the product method,
    (g(dr) + b) (2 b + 1) + (g(dc) + b) with b = int(beta) and (dr, dc) = pos_i - pos_j (the query's position
    minus the key's); every pair involving a token off the grid (the class token, head tokens) shares the
    extra bucket (2 b + 1)^2.

    Args:
        grid: the token grid (h, w).
        prefix: the tokens before the grid (class token).
        joined: the tokens after it (head tokens).
        alpha: `piecewise_index`'s.
        beta: `piecewise_index`'s.
        gamma: `piecewise_index`'s.
    """
    h, w = grid
    b = int(beta)
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    rows, cols = rows.flatten(), cols.flatten()
    r = piecewise_index(rows[:, None] - rows[None, :], alpha, beta, gamma) + b
    c = piecewise_index(cols[:, None] - cols[None, :], alpha, beta, gamma) + b
    n = prefix + h * w + joined
    out = torch.full((n, n), (2 * b + 1) ** 2, dtype=torch.long)
    out[prefix:prefix + h * w, prefix:prefix + h * w] = r * (2 * b + 1) + c
    return out


def contextual_bias(x: torch.Tensor, table: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
    """Eq. 15 on keys: bias[b, h, i, j] = x_i . r_{bucket(i, j)} for x (B, H, N, d) (the scaled queries),
    table (1 or H, d, buckets): one matmul to (B, H, N, buckets), then a gather along the last axis.

    Args:
        x: (B, H, N, d) scaled queries.
        table: (1 or H, d, buckets) encodings.
        buckets: (N, N) bucket indices (`product_buckets`).
    """
    lookup = x @ table[None]  # (B, H, N, buckets)
    return lookup.gather(-1, buckets.expand(*lookup.shape[:2], *buckets.shape))


def contextual_values(attn: torch.Tensor, table: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
    """Eq. 16: sum_j attn[i, j] r_{bucket(i, j)} for attn (B, H, N, N), table (1 or H, buckets, d). The weights
    of each query's keys are summed per bucket (a scatter-add to (B, H, N, buckets)), then one matmul: the
    (N, N, d) map of encodings is never materialised.

    Args:
        attn: (B, H, N, N) attention weights.
        table: (1 or H, buckets, d) encodings.
        buckets: (N, N) bucket indices (`product_buckets`).
    """
    index = buckets.expand(*attn.shape[:2], *buckets.shape)
    per_bucket = attn.new_zeros(*attn.shape[:3], table.shape[-2]).scatter_add(-1, index, attn)
    return per_bucket @ table[None]
