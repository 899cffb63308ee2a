"""T2T-ViT's tokens-to-token pieces (Yuan et al. 2021, Sec. 3.1): the soft split and the performer token block's
linear attention with positive random features (Choromanski et al. 2021, FAVOR+, as T2T's released code)."""

import math

import torch
import torch.nn.functional as F
from einops import rearrange

from ...ops.precision import float32

__all__ = ["performer_attention", "positive_features", "random_features", "soft_split"]


def soft_split(x: torch.Tensor, kernel: int, stride: int, padding: int) -> torch.Tensor:
    """Eq. 3: overlapping k x k patches of a (B, C, H, W) map as tokens (B, L, C k^2), each token's values
    channel-major (C, kh, kw), as nn.Unfold orders them.

    Args:
        x: (B, C, H, W) map.
        kernel: the patch side k.
        stride: the step between patches.
        padding: zeros added on each side.
    """
    return rearrange(F.unfold(x, kernel, padding=padding, stride=stride), "b ckk l -> b l ckk")


def random_features(m: int, dim: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """w (m, dim): orthogonal rows (an orthonormal set when m <= dim) scaled to norm sqrt(m), as drawn by the
    released Token_performer.

    Args:
        m: the number of features.
        dim: their width d.
        generator: the random generator; None: torch's default.
    """
    w = torch.empty(m, dim)
    torch.nn.init.orthogonal_(w, generator=generator)
    return w * math.sqrt(m)


def positive_features(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """FAVOR+'s positive features phi(x) = exp(w x - |x|^2 / 2) / sqrt(m) of x (..., d), w (m, d): E[phi(q) phi(k)]
    = exp(q . k) over Gaussian w.

    Args:
        x: (..., d) inputs.
        w: (m, d) random features (`random_features`).
    """
    return torch.exp(x @ w.t() - x.square().sum(-1, keepdim=True) / 2) / math.sqrt(w.shape[0])


@float32
def performer_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: torch.Tensor,
                        eps: float = 1e-8) -> torch.Tensor:
    """One-head linear attention (B, T, d): y_t = phi(q_t) sum_i phi(k_i)^T v_i / (phi(q_t) . sum_i phi(k_i) +
    eps), O(T m d) instead of softmax's O(T^2 d). q and k are not pre-scaled (released). Computed in float32 at
    least (the exponentials overflow in half precision; the released code casts too).

    Args:
        q: (B, T, d) queries.
        k: (B, T, d) keys.
        v: (B, T, d_v) values.
        w: (m, d) random features (`random_features`).
        eps: added to the normaliser.
    """
    q, k, v, w = (t.float() if t.dtype in (torch.float16, torch.bfloat16) else t for t in (q, k, v, w))
    qp, kp = positive_features(q, w), positive_features(k, w)  # (B, T, m)
    norm = qp @ kp.sum(1, keepdim=True).transpose(1, 2)  # (B, T, 1)
    return (qp @ (kp.transpose(1, 2) @ v)) / (norm + eps)
