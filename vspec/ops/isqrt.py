"""iSQRT-COV: the matrix square root of an SPD matrix by Newton-Schulz iteration (Li et al. 2018),
the MPN that SoT's GCP baseline uses (Table 3b)."""

import torch


def isqrt_cov(sigma: torch.Tensor, iters: int = 5) -> torch.Tensor:
    """Approximately sigma^(1/2) for SPD sigma (..., n, n), differentiable by plain autograd:
        pre-normalise  A = sigma / tr(sigma)              (eigenvalues in (0, 1], so it converges)
        iterate        Y_0 = A, Z_0 = I,  T_k = (3I - Z_k Y_k) / 2,  Y_{k+1} = Y_k T_k,  Z_{k+1} = T_k Z_k
        post-compensate  sigma^(1/2) ~ sqrt(tr(sigma)) Y_iters.
    Z_k approaches A^(-1/2); the last step skips it. Accuracy grows with `iters` (>= 1); the iteration
    is slow on eigenvalues of A near 0, i.e. on ill-conditioned sigma. A zero trace is clamped to the
    dtype's smallest normal so a zero input gives a zero output."""
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
