"""SoT's functions, each on any leading (batch) dims in float32 or float64 (under autocast they compute
in float32 whatever the inputs' dtype, `vspec.ops.precision.float32`):

- `cross_covariance` / `covariance` (Eq. 2-3). The paper stores tokens as columns (X = W Z is m x q,
  Y = R Z is n x q) and writes Q = (1/q) X Y^T; vspec keeps tokens as rows, so x is (..., N, m), y is
  (..., N, n) and Q = (1/N) x^T y, (..., m, n). Centering, applied to x and y separately per sample:
  "none" (the paper's formula), "scalar" (subtract the single mean of all N*m entries: the released
  code), "channel" (per-channel mean over the tokens: the classical cross-covariance). `mask` (..., N), True
  at the tokens to pool (a padded text batch's real tokens): the means, the sum and N count those alone.
- `svpn_exact`: Eq. 5 via SVD, with its own backward (supplement C).
- `power_iteration`: Eq. 6, the top singular triple of Q from a start vector.
- `svpn_approx`: Eq. 6-8, power iteration with deflation; also the released code's form.
- `epn`: element-wise signed square root + l2 normalisation (the EPN row of Table 4d).
- `isqrt_cov`: iSQRT-COV, the matrix square root of an SPD matrix by Newton-Schulz iteration (Li et
  al. 2018), the MPN of SoT's GCP baseline (Table 3b).
"""

import torch
from torch.autograd.function import once_differentiable

from ...ops.precision import float32

__all__ = ["CENTERINGS", "covariance", "cross_covariance", "epn", "isqrt_cov", "power_iteration", "svpn_approx",
           "svpn_exact"]

CENTERINGS = ("none", "scalar", "channel")


def _center(x: torch.Tensor, centering: str, w: torch.Tensor | None = None, count: torch.Tensor | None = None):
    """x centred; with `w` (..., N, 1) the 0 / 1 weights of the tokens that count (`count` of them), the means
    over those tokens and every other token zeroed."""
    if centering not in CENTERINGS:
        raise ValueError(f"centering: must be one of {', '.join(map(repr, CENTERINGS))}, got {centering!r}")
    if w is None:
        if centering == "scalar":
            return x - x.mean(dim=(-2, -1), keepdim=True)
        return x - x.mean(dim=-2, keepdim=True) if centering == "channel" else x
    if centering == "scalar":
        x = x - (x * w).sum(dim=(-2, -1), keepdim=True) / (count * x.shape[-1])
    elif centering == "channel":
        x = x - (x * w).sum(dim=-2, keepdim=True) / count
    return x * w


@float32
def cross_covariance(x: torch.Tensor, y: torch.Tensor, centering: str = "scalar",
                     mask: torch.Tensor | None = None) -> torch.Tensor:
    """Q = (1/N) Xc^T Yc (SoT Eq. 2-3, Q = (1/q) X Y^T in the paper's column layout); x (..., N, m),
    y (..., N, n) -> (..., m, n). `centering` is "none" | "scalar" | "channel"; `mask` (..., N) bool, True at
    the tokens pooled (module docstring); a sample with none pooled gives Q = 0.

    Args:
        x: (..., N, m) tokens.
        y: (..., N, n) tokens, as many as x.
        centering: "none", "scalar" (the mean of all entries) or "channel" (each channel's mean).
        mask: (..., N) bool, the tokens pooled; None: all.
    """
    if x.shape[-2] != y.shape[-2]:
        raise ValueError(f"x and y must have the same number of tokens, got {x.shape[-2]} and {y.shape[-2]}")
    if mask is None:
        xc, yc = _center(x, centering), _center(y, centering)
        return xc.transpose(-2, -1) @ yc / x.shape[-2]
    w = mask.to(x.dtype).unsqueeze(-1)
    count = w.sum(dim=-2, keepdim=True).clamp(min=1)
    xc, yc = _center(x, centering, w, count), _center(y, centering, w, count)
    return xc.transpose(-2, -1) @ yc / count


def covariance(x: torch.Tensor, centering: str = "channel") -> torch.Tensor:
    """(1/N) Xc^T Xc for x (..., N, m) -> (..., m, m): `cross_covariance(x, x, centering)`; with the
    default "channel" centering the classical (biased) covariance that GCP / iSQRT-COV pools.

    Args:
        x: (..., N, m) tokens.
        centering: as `cross_covariance`'s.
    """
    return cross_covariance(x, x, centering)


def _floor(dtype: torch.dtype) -> float:
    """A positive number far below any meaningful singular value of this dtype (sqrt of the smallest
    normal), used to keep divisions of all-zero inputs finite without touching any other input."""
    return torch.finfo(dtype).tiny ** 0.5


def _mv(q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Batched matrix-vector product (..., m, n) x (..., n) -> (..., m); multiply-and-sum, which
    beats a batched matmul for SoT's small (14 x 14) matrices on the CPU."""
    return (q * x.unsqueeze(-2)).sum(-1)


# ---------------------------------------------------------------------------------------------
# exact svPN (Eq. 5) and its backward (supplement C)


@float32
def _svpn_backward(g, u, s, vh, alpha: float, eps: float):
    """dl/dQ for svPN(Q) = U f(S) V^T, f(l) = l^alpha, given dl/dsvPN(Q) = g.

    Supplement C's Corollary 1, regrouped. With P = U^T g V (k x k, k = min(m, n)) split into its
    symmetric and antisymmetric parts,
        dl/dQ = U [D- o sym(P) + D+ o antisym(P)] V^T                    (in-span part)
              + (I - U U^T) g V diag(f(l)/l) V^T                        (m > n only)
              + U diag(f(l)/l) U^T g (I - V V^T)                        (m < n only)
    with D-_ij = (f_i - f_j)/(l_i - l_j) and D+_ij = (f_i + f_j)/(l_i + l_j). For distinct l these
    are the corollary's K_ij = 1/(l_i^2 - l_j^2) terms: D-_ij = (f_i - f_j)(l_i + l_j) K_ij and
    D+_ij = (f_i + f_j)(l_i - l_j) K_ij. Two departures, both only where the corollary is singular:
    - ties: where |l_i - l_j| <= sqrt(machine eps) * max(l_i, l_j), D-_ij is the limit f'((l_i + l_j)/2)
      instead of the corollary's K_ij = 0 (that convention drops the tangent term and depends on the
      arbitrary basis the SVD picks inside a repeated singular value; the limit is the true gradient,
      e.g. alpha * sym(g) + antisym(g) at Q = I);
    - small singular values: the backward uses f~(l) = eps^(alpha-1) * l on [0, eps) and l^alpha above
      (the chord of l^alpha), so every l^(alpha-1) factor is at most eps^(alpha-1) and zero or
      rank-deficient inputs get finite gradients. It is the exact gradient of U f~(S) V^T, which
      differs from the forward by less than eps^alpha per singular value below eps.
    """
    cap = eps ** (alpha - 1.0)
    small = s < eps
    f = torch.where(small, s * cap, s.clamp_min(eps) ** alpha)

    def df(x):  # f~'
        return torch.where(x < eps, torch.full_like(x, cap), alpha * x.clamp_min(eps) ** (alpha - 1.0))

    si, sj = s.unsqueeze(-1), s.unsqueeze(-2)
    fi, fj = f.unsqueeze(-1), f.unsqueeze(-2)
    diff, total = si - sj, si + sj
    tol = torch.finfo(s.dtype).eps ** 0.5
    tie = diff.abs() <= tol * torch.maximum(si, sj)
    d_minus = torch.where(tie, df(total / 2), (fi - fj) / torch.where(tie, torch.ones_like(diff), diff))
    d_plus = torch.where(total > 0, (fi + fj) / torch.where(total > 0, total, torch.ones_like(total)),
                         torch.full_like(total, cap))

    v = vh.mT
    gv = g @ v
    p = u.mT @ gv
    inner = d_minus * (p + p.mT) / 2 + d_plus * (p - p.mT) / 2
    dq = u @ inner @ vh
    m, n = g.shape[-2:]
    ratio = s.clamp_min(eps) ** (alpha - 1.0)  # f~(l) / l
    if m > n:
        dq = dq + ((gv - u @ p) * ratio.unsqueeze(-2)) @ vh
    elif m < n:
        dq = dq + u @ (ratio.unsqueeze(-1) * (u.mT @ g - p @ vh))
    return dq


class _SvPN(torch.autograd.Function):
    """Eq. 5 forward via the thin SVD; backward `_svpn_backward` (not twice differentiable)."""

    @staticmethod
    def forward(ctx, q, alpha, eps):
        u, s, vh = torch.linalg.svd(q, full_matrices=False)
        ctx.save_for_backward(u, s, vh)
        ctx.alpha, ctx.eps = alpha, eps
        powered = torch.where(s > 0, s.pow(alpha), torch.zeros_like(s))
        return (u * powered.unsqueeze(-2)) @ vh

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        u, s, vh = ctx.saved_tensors
        return _svpn_backward(g, u, s, vh, ctx.alpha, ctx.eps), None, None


@float32
def svpn_exact(q: torch.Tensor, alpha: float = 0.5, eps: float = 1e-5) -> torch.Tensor:
    """svPN(Q) = sum_i l_i^alpha u_i v_i^T over the SVD Q = sum_i l_i u_i v_i^T (SoT Eq. 5), for
    Q (..., m, n). alpha = 1 gives Q back; zero singular values stay zero (also for alpha = 0).
    Backward: supplement C, with repeated singular values handled by their limit and singular values
    below `eps` (> 0) linearised so that l^(alpha-1) <= eps^(alpha-1) (see `_svpn_backward`).

    Args:
        q: (..., m, n) matrices.
        alpha: the power of the singular values.
        eps: (> 0) the singular values below it are linearised in the backward.
    """
    if not eps > 0:
        raise ValueError(f"eps: must be > 0, got {eps}")
    return _SvPN.apply(q, float(alpha), float(eps))


# ---------------------------------------------------------------------------------------------
# approximate svPN (Eq. 6-8)


def _normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(eps)


@float32
def power_iteration(q: torch.Tensor, v0: torch.Tensor, iters: int = 1, eps: float | None = None):
    """Top singular triple of Q (..., m, n) by SoT Eq. 6, started from v0 ((n,) or (..., n),
    broadcast against Q's leading dims), `iters` >= 1 times:
        u <- Q v / |Q v|,  v <- Q^T u / |Q^T u|.
    Returns (u (..., m), s (...), v (..., n)) with s = u^T Q v (= |Q^T u| of the last step, the
    paper's estimate of l_1; 0 <= s <= l_1). Differentiable through every iteration (nothing
    detached). Norms are clamped below at `eps` (default: sqrt of the dtype's smallest normal), so a
    zero Q gives u = v = 0, s = 0 with finite gradients instead of NaN.

    Args:
        q: (..., m, n) matrices.
        v0: the start vector, (n,) or (..., n).
        iters: the iterations (>= 1).
        eps: the norms' floor; None: sqrt of the dtype's smallest normal.
    """
    if iters < 1:
        raise ValueError(f"iters: must be >= 1, got {iters}")
    eps = _floor(q.dtype) if eps is None else eps
    v = v0.to(q.dtype)
    for _ in range(iters):
        u = _normalize(_mv(q, v), eps)
        v = _normalize(_mv(q.mT, u), eps)
    return u, (u * _mv(q, v)).sum(-1), v


def _outer(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return u.unsqueeze(-1) * v.unsqueeze(-2)


@float32
def svpn_approx(q: torch.Tensor, alpha: float = 0.5, num_sv: int = 1, iters: int = 1,
                v0: torch.Tensor | None = None, eps: float = 0.0, released_form: bool = False) -> torch.Tensor:
    """Approximate svPN of Q (..., m, n) with r = `num_sv` power-iterated singular triples (SoT Eq. 6-8).

    For k = 1..r, (u_k, s_k, v_k) = power_iteration(Q_k, v0, iters) on the deflated matrix
    Q_k = Q - sum_{i<k} s_i u_i v_i^T (Eq. 7; each k restarts from the same v0, default the constant
    unit vector 1/sqrt(n), else (n,) or (..., n)). Then
    - released_form=False (Eq. 8):
        sum_{i<r} s_i^alpha u_i v_i^T + (Q - sum_{i<r} s_i u_i v_i^T) / (s_r^(1-alpha) + eps);
      with r = 1 and eps = 0 this is Q / s_1^(1-alpha).
    - released_form=True (SoT's released code, which has r = 1 and eps = 1e-5; extended to any r by
      taking the r-th pair out of the residual too):
        sum_{i<=r} s_i^alpha u_i v_i^T + (Q - sum_{i<=r} s_i u_i v_i^T) / (s_r^(1-alpha) + eps),
      i.e. u s^alpha v^T + (Q - u s v^T) / (s^(1-alpha) + eps) for r = 1. Equal to Eq. 8 when eps = 0;
      with eps > 0 the top direction keeps exactly s^alpha and only the residual is damped.
    Caveat (Eq. 6-7 with a shared v0): with iters = 1 the deflated Q_2 maps v0 to exactly 0
    (v_1^T v0 = |Q v0| / s_1), so for r >= 2 and one iteration every k >= 2 starts from 0 / 0 and its
    triple is a rounding-noise direction; use iters >= 2 when r >= 2.
    `eps` sits in the residual's denominator only. Inside the powers each s is clamped below at a
    floor (sqrt of the dtype's smallest normal; for k >= 2 also machine eps * s_1, since deflated
    estimates below that are rounding noise), and s^alpha is 0 at the floor: an all-zero Q gives a
    zero output with finite gradients even with eps = 0, and so does r beyond the rank of Q (where
    Eq. 8 itself would divide rounding noise by ~0).

    Args:
        q: (..., m, n) matrices.
        alpha: the power of the singular values.
        num_sv: r, the singular triples taken (1..min(m, n)).
        iters: the power iterations per triple.
        v0: the start vector, (n,) or (..., n); None: 1/sqrt(n) everywhere.
        eps: added to the residual's denominator.
        released_form: the released code's form (above) instead of Eq. 8.
    """
    m, n = q.shape[-2:]
    if not 1 <= num_sv <= min(m, n):
        raise ValueError(f"num_sv: must be in 1..min(m, n) = {min(m, n)}, got {num_sv}")
    if v0 is None:
        v0 = q.new_full((n,), n ** -0.5)
    # guards, no gradient through them: s_1 is floored at a tiny number, deflated s_k at the
    # rounding level of s_1
    floor = _floor(q.dtype)
    head, rest = None, q
    for k in range(num_sv):
        u, s, v = power_iteration(rest, v0, iters)
        s = s.unsqueeze(-1).unsqueeze(-1)
        small = s <= floor
        sc = torch.where(small, floor, s)
        if k < num_sv - 1 or released_form:
            outer = _outer(u, v)
            term = torch.where(small, 0.0, sc ** alpha) * outer
            head = term if head is None else head + term
            rest = rest - s * outer
        if k == 0:
            floor = (torch.finfo(q.dtype).eps * s.detach()).clamp_min(floor)
    out = rest / (sc ** (1.0 - alpha) + eps)
    return out if head is None else head + out


# ---------------------------------------------------------------------------------------------
# EPN (Table 4d)


@float32
def epn(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Element-wise power normalisation (Table 4d, "EPN"): signed square root sign(x) sqrt|x|, then
    l2 normalisation over the last dim (flatten a matrix first). The root is x / sqrt(|x| + eps):
    within eps/(2|x|) of sign(x) sqrt|x|, odd, sign-preserving and with slope <= 1/sqrt(eps) at 0.
    The norm is clamped below at eps, so an all-zero row stays zero.

    Args:
        x: (..., d) vectors.
        eps: the root's and the norm's floor.
    """
    y = x / (x.abs() + eps).sqrt()
    return y / torch.linalg.vector_norm(y, dim=-1, keepdim=True).clamp_min(eps)


@float32
def isqrt_cov(sigma: torch.Tensor, iters: int = 5) -> torch.Tensor:
    """Approximately sigma^(1/2) for SPD sigma (..., n, n), differentiable by plain autograd:
        pre-normalise  A = sigma / tr(sigma)              (eigenvalues in (0, 1], so it converges)
        iterate        Y_0 = A, Z_0 = I,  T_k = (3I - Z_k Y_k) / 2,  Y_{k+1} = Y_k T_k,  Z_{k+1} = T_k Z_k
        post-compensate  sigma^(1/2) ~ sqrt(tr(sigma)) Y_iters.
    Z_k approaches A^(-1/2); the last step skips it. Accuracy grows with `iters` (>= 1); the iteration
    is slow on eigenvalues of A near 0, i.e. on ill-conditioned sigma. A zero trace is clamped to the
    dtype's smallest normal so a zero input gives a zero output.

    Args:
        sigma: (..., n, n) symmetric positive definite matrices.
        iters: the Newton-Schulz iterations (>= 1).
    """
    if iters < 1:
        raise ValueError(f"iters: must be >= 1, got {iters}")
    n = sigma.shape[-1]
    trace = sigma.diagonal(dim1=-2, dim2=-1).sum(-1).clamp_min(torch.finfo(sigma.dtype).tiny)
    trace = trace.unsqueeze(-1).unsqueeze(-1)
    eye = torch.eye(n, dtype=sigma.dtype, device=sigma.device)
    y, z = sigma / trace, eye
    for k in range(iters):
        t = (3 * eye - z @ y) / 2
        y, z = y @ t, (t @ z if k < iters - 1 else z)
    return y * trace.sqrt()
