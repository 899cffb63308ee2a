"""SoT's ops (cross-covariance, svPN exact and approximate, EPN, iSQRT) against references written
from the paper's equations with numpy / torch.linalg, never with the function under test."""

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vspec.models.sot.ops import covariance, cross_covariance, epn, isqrt_cov, power_iteration, svpn_approx, svpn_exact

F64 = torch.float64
seeds = st.integers(0, 2**16)
dims = st.integers(1, 6)
batches = st.sampled_from([(), (1,), (2,), (2, 3)])
alphas = st.floats(0.1, 1.0)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def orthonormal(rows: int, cols: int, g: torch.Generator) -> torch.Tensor:
    """rows x cols with orthonormal columns (rows >= cols)."""
    return torch.linalg.qr(torch.randn(rows, cols, generator=g, dtype=F64))[0]


def with_singular_values(m: int, n: int, s, g: torch.Generator) -> torch.Tensor:
    """U diag(s) V^T with random orthonormal U (m x k), V (n x k), k = len(s)."""
    k = len(s)
    return orthonormal(m, k, g) @ torch.diag(torch.as_tensor(s, dtype=F64)) @ orthonormal(n, k, g).T


def separated(batch, m, n, g, ratio=1.5):
    """Batch of m x n matrices whose singular values are l_1 > l_2 > ... with l_i / l_{i+1} >= ratio."""
    k = min(m, n)
    out = []
    for _ in range(int(np.prod(batch))):
        gaps = ratio + torch.rand(k, generator=g, dtype=F64)
        s = 3.0 / torch.cumprod(gaps, 0) * ratio
        out.append(with_singular_values(m, n, s.tolist(), g))
    return torch.stack(out).reshape(*batch, m, n)


def svpn_reference(q: torch.Tensor, alpha: float) -> np.ndarray:
    """Eq. 5 with numpy's SVD."""
    u, s, vh = np.linalg.svd(q.detach().double().numpy(), full_matrices=False)
    return (u * s[..., None, :] ** alpha) @ vh


# ---------------------------------------------------------------------------------------------
# cross-covariance (Eq. 2-3)


def loop_cross_covariance(x: np.ndarray, y: np.ndarray, centering: str) -> np.ndarray:
    """Q[i, j] = (1/N) sum_t (x[t, i] - cx) (y[t, j] - cy), one matrix, plain loops."""
    n_tok, m = x.shape
    n = y.shape[1]
    if centering == "none":
        cx, cy = np.zeros(m), np.zeros(n)
    elif centering == "scalar":
        cx, cy = np.full(m, x.sum() / x.size), np.full(n, y.sum() / y.size)
    else:
        cx = np.array([sum(x[t, i] for t in range(n_tok)) / n_tok for i in range(m)])
        cy = np.array([sum(y[t, j] for t in range(n_tok)) / n_tok for j in range(n)])
    q = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            q[i, j] = sum((x[t, i] - cx[i]) * (y[t, j] - cy[j]) for t in range(n_tok)) / n_tok
    return q


@given(batch=st.integers(1, 3), tokens=st.integers(1, 7), m=dims, n=dims,
       centering=st.sampled_from(["none", "scalar", "channel"]), seed=seeds)
def test_cross_covariance_matches_loops(batch, tokens, m, n, centering, seed):
    g = gen(seed)
    x = torch.randn(batch, tokens, m, generator=g, dtype=F64) + torch.randn(1, generator=g, dtype=F64)
    y = torch.randn(batch, tokens, n, generator=g, dtype=F64) * 2 - 1
    q = cross_covariance(x, y, centering)
    assert q.shape == (batch, m, n)
    for b in range(batch):
        expected = loop_cross_covariance(x[b].numpy(), y[b].numpy(), centering)
        np.testing.assert_allclose(q[b].numpy(), expected, rtol=1e-10, atol=1e-10)
    q32 = cross_covariance(x.float(), y.float(), centering)
    assert q32.dtype == torch.float32 and torch.allclose(q32.double(), q, rtol=1e-4, atol=1e-4)


@given(shape=batches, tokens=st.integers(2, 9), m=dims, seed=seeds)
def test_channel_covariance_is_symmetric_psd(shape, tokens, m, seed):
    g = gen(seed)
    x = torch.randn(*shape, tokens, m, generator=g, dtype=F64) * 3 + 1
    c = covariance(x)  # default: channel centering
    assert torch.allclose(c, c.mT, atol=1e-12)
    assert (torch.linalg.eigvalsh(c) >= -1e-10).all()
    np_x = x.reshape(-1, tokens, m).numpy()
    for b, sample in enumerate(np_x):  # numpy's biased covariance, rows = variables
        np.testing.assert_allclose(c.reshape(-1, m, m)[b].numpy(), np.cov(sample.T, bias=True).reshape(m, m),
                                   rtol=1e-9, atol=1e-10)


@given(batch=st.integers(1, 3), tokens=st.integers(1, 7), m=dims, n=dims, seed=seeds)
def test_scalar_centering_removes_one_scalar_per_sample(batch, tokens, m, n, seed):
    g = gen(seed)
    x = torch.randn(batch, tokens, m, generator=g, dtype=F64)
    y = torch.randn(batch, tokens, n, generator=g, dtype=F64)
    a = torch.randn(batch, 1, 1, generator=g, dtype=F64) * 5
    b = torch.randn(batch, 1, 1, generator=g, dtype=F64) * 5
    q = cross_covariance(x, y, "scalar")
    # invariant to adding one scalar per sample to x and another to y ...
    assert torch.allclose(cross_covariance(x + a, y + b, "scalar"), q, atol=1e-10)
    # ... and equal to the uncentered product of the scalar-centered inputs
    xc = x - x.mean(dim=(1, 2), keepdim=True)
    yc = y - y.mean(dim=(1, 2), keepdim=True)
    assert torch.allclose(cross_covariance(xc, yc, "none"), q, atol=1e-12)
    # channel centering is invariant to a per-channel shift, scalar centering only to its mean
    shift = torch.randn(batch, 1, m, generator=g, dtype=F64)
    assert torch.allclose(cross_covariance(x + shift, y, "channel"), cross_covariance(x, y, "channel"), atol=1e-10)


def test_cross_covariance_rejects_bad_arguments():
    with pytest.raises(ValueError, match="centering"):
        cross_covariance(torch.zeros(3, 2), torch.zeros(3, 2), "per-token")
    with pytest.raises(ValueError, match="tokens"):
        cross_covariance(torch.zeros(3, 2), torch.zeros(4, 2))


# ---------------------------------------------------------------------------------------------
# exact svPN (Eq. 5, supplement C)


@given(shape=batches, m=dims, n=dims, alpha=alphas, seed=seeds)
def test_svpn_exact_matches_svd_reference(shape, m, n, alpha, seed):
    q = torch.randn(*shape, m, n, generator=gen(seed), dtype=F64)
    out = svpn_exact(q, alpha)
    assert out.shape == q.shape
    np.testing.assert_allclose(out.numpy(), svpn_reference(q, alpha), rtol=1e-9, atol=1e-10)
    out32 = svpn_exact(q.float(), alpha)
    assert out32.dtype == torch.float32
    np.testing.assert_allclose(out32.double().numpy(), svpn_reference(q, alpha), rtol=1e-3, atol=1e-3)
    assert torch.allclose(svpn_exact(q, 1.0), q, atol=1e-12)  # alpha = 1 is the identity


def degenerate_matrices():
    g = gen(0)
    rot = orthonormal(4, 4, g)
    return {
        "identity": torch.eye(4, dtype=F64),
        "zero_square": torch.zeros(3, 3, dtype=F64),
        "zero_wide": torch.zeros(2, 5, dtype=F64),
        "rank1_tall": torch.outer(torch.randn(5, generator=g, dtype=F64), torch.randn(3, generator=g, dtype=F64)),
        "rank1_square": torch.outer(torch.randn(4, generator=g, dtype=F64), torch.randn(4, generator=g, dtype=F64)),
        "rank2_wide": torch.randn(3, 2, generator=g, dtype=F64) @ torch.randn(2, 6, generator=g, dtype=F64),
        "repeated": rot @ torch.diag(torch.tensor([2.0, 2.0, 1.0, 1.0], dtype=F64)) @ rot.T.flip(0),
        "repeated_and_zero": with_singular_values(5, 4, [3.0, 3.0, 0.0, 0.0], g),
        "near_repeated": with_singular_values(4, 4, [1.0, 1.0 + 1e-10, 0.5, 1e-9], g),
    }


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("name", sorted(degenerate_matrices()))
def test_svpn_exact_degenerate_inputs_stay_finite(name, dtype):
    q = degenerate_matrices()[name].to(dtype).requires_grad_()
    out = svpn_exact(q, 0.5)
    # l^0.5 of a zero singular value computed as rounding noise u: sqrt(u), 3e-4 / 1.5e-8
    tol = 1e-3 if dtype == torch.float32 else 1e-7
    np.testing.assert_allclose(out.detach().double().numpy(), svpn_reference(q, 0.5), rtol=tol, atol=tol)
    (grad,) = torch.autograd.grad(out, q, torch.randn(q.shape, generator=gen(1), dtype=dtype))
    assert torch.isfinite(grad).all()
    # the backward floors singular values at eps = 1e-5: l^(alpha-1) <= eps^(alpha-1) ~ 316
    assert grad.abs().max() < 1e3 * q.numel()


def test_svpn_exact_gradient_at_identity_is_the_tie_limit():
    """Near I, svPN(I + E) = I + alpha sym(E) + antisym(E) + O(|E|^2): SPD perturbations are powered,
    rotations are kept. The corollary's K_ij = 0 convention would give G_offdiag + alpha G_diag."""
    q = torch.eye(4, dtype=F64, requires_grad=True)
    g = torch.randn(4, 4, generator=gen(3), dtype=F64)
    (grad,) = torch.autograd.grad(svpn_exact(q, 0.3), q, g)
    assert torch.allclose(grad, 0.3 * (g + g.T) / 2 + (g - g.T) / 2, atol=1e-12)


@settings(max_examples=10)
@given(m=st.integers(1, 5), n=st.integers(1, 5), alpha=st.floats(0.2, 0.9), seed=seeds)
def test_svpn_exact_gradcheck_distinct_singular_values(m, n, alpha, seed):
    q = separated((2,), m, n, gen(seed), ratio=1.2).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: svpn_exact(t, alpha), (q,))


@settings(max_examples=5)
@given(seed=seeds, tall=st.booleans())
def test_svpn_exact_gradcheck_repeated_nonzero_singular_values(seed, tall):
    """With all singular values > 0, svPN is smooth even where they repeat: the limit handles ties."""
    g = gen(seed)
    q = with_singular_values(5 if tall else 3, 3, [2.0, 2.0, 0.7], g).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: svpn_exact(t, 0.5), (q,))


def corollary_1_gradient(q: torch.Tensor, g: torch.Tensor, alpha: float) -> torch.Tensor:
    """Supplement C, Corollary 1, transcribed (thin SVD, m >= n, distinct singular values)."""
    u, s, vh = torch.linalg.svd(q, full_matrices=False)
    v = vh.mT
    lam, lam_inv, lam_a = torch.diag_embed(s), torch.diag_embed(1 / s), torch.diag_embed(s**alpha)
    dl_du = g @ v @ lam_a
    dl_dv = g.mT @ u @ lam_a
    dl_dlam = torch.diag_embed(alpha * s ** (alpha - 1) * torch.diagonal(u.mT @ g @ v, dim1=-2, dim2=-1))
    k = 1 / (s[..., :, None] ** 2 - s[..., None, :] ** 2)
    k = torch.where(torch.isinf(k), torch.zeros_like(k), k)

    def diag(a):
        return torch.diag_embed(torch.diagonal(a, dim1=-2, dim2=-1))

    def sym(a):
        return (a + a.mT) / 2

    inner = v.mT @ (dl_dv - v @ lam_inv @ dl_du.mT @ u @ lam)
    return (dl_du @ lam_inv @ vh + u @ diag(dl_dlam - u.mT @ dl_du @ lam_inv) @ vh
            + 2 * u @ lam @ sym(k.mT * inner) @ vh)


@given(shape=batches, m=dims, n=dims, alpha=alphas, seed=seeds)
def test_svpn_exact_backward_is_corollary_1(shape, m, n, alpha, seed):
    g = gen(seed)
    q = separated(shape, m, n, g, ratio=1.1).requires_grad_()
    grad_out = torch.randn(q.shape, generator=g, dtype=F64)
    (grad,) = torch.autograd.grad(svpn_exact(q, alpha), q, grad_out)
    # the corollary is stated for m >= n; for m < n use svPN(Q^T) = svPN(Q)^T
    expected = (corollary_1_gradient(q.detach(), grad_out, alpha) if m >= n
                else corollary_1_gradient(q.detach().mT, grad_out.mT, alpha).mT)
    assert torch.allclose(grad, expected, rtol=1e-7, atol=1e-8)


# ---------------------------------------------------------------------------------------------
# Proposition 1 and power iteration (Eq. 4, 6)


@given(m=dims, n=dims, k=st.integers(0, 5), seed=seeds)
def test_proposition_1_constrained_cross_covariance_is_kth_singular_value(m, n, k, seed):
    """max u^T Q v over unit u, v orthogonal to the first k singular pairs is l_{k+1}."""
    g = gen(seed)
    q = torch.randn(m, n, generator=g, dtype=F64)
    u_all, s, vh = torch.linalg.svd(q)
    k = min(k, min(m, n) - 1)
    u_perp, v_perp = u_all[:, k:], vh.T[:, k:]
    a = torch.nn.functional.normalize(u_perp @ torch.randn(m - k, 500, generator=g, dtype=F64), dim=0)
    b = torch.nn.functional.normalize(v_perp @ torch.randn(n - k, 500, generator=g, dtype=F64), dim=0)
    values = (a * (q @ b)).sum(0)
    assert (values <= s[k] + 1e-12).all()
    assert torch.isclose(u_all[:, k] @ q @ vh[k], s[k], rtol=1e-12)


@given(shape=batches, m=dims, n=dims, seed=seeds, broadcast_v0=st.booleans())
def test_power_iteration_estimate_is_below_l1_and_nondecreasing(shape, m, n, seed, broadcast_v0):
    g = gen(seed)
    q = torch.randn(*shape, m, n, generator=g, dtype=F64)
    v0 = torch.randn((n,) if broadcast_v0 else (*shape, n), generator=g, dtype=F64)
    l1 = torch.linalg.matrix_norm(q, ord=2)
    previous = torch.zeros(shape, dtype=F64)
    for iters in range(1, 8):
        u, s, v = power_iteration(q, v0, iters)
        assert u.shape == (*shape, m) and v.shape == (*shape, n) and s.shape == shape
        assert torch.allclose(torch.linalg.vector_norm(u, dim=-1), torch.ones(shape, dtype=F64))
        assert torch.allclose(torch.linalg.vector_norm(v, dim=-1), torch.ones(shape, dtype=F64))
        assert torch.allclose(s, (u * (q @ v.unsqueeze(-1)).squeeze(-1)).sum(-1))  # s = u^T Q v
        assert (s <= l1 * (1 + 1e-12)).all()
        assert (s >= previous * (1 - 1e-12)).all()
        previous = s


@given(m=dims, n=dims, seed=seeds)
def test_power_iteration_one_step_is_eq_6(m, n, seed):
    g = gen(seed)
    q = torch.randn(m, n, generator=g, dtype=F64)
    v0 = torch.randn(n, generator=g, dtype=F64, requires_grad=True)
    u, s, v = power_iteration(q, v0, 1)
    u_ref = q @ v0.detach() / torch.linalg.norm(q @ v0.detach())
    v_ref = q.T @ u_ref / torch.linalg.norm(q.T @ u_ref)
    assert torch.allclose(u, u_ref) and torch.allclose(v, v_ref)
    assert torch.isclose(s, torch.linalg.norm(q.T @ u_ref))  # the paper's estimate |Q^T u|
    (grad,) = torch.autograd.grad(s + v.sum(), v0)  # gradients reach a learnable start vector
    assert torch.isfinite(grad).all()


def test_power_iteration_on_zero_matrix_is_finite():
    q = torch.zeros(2, 3, 4, requires_grad=True)
    v0 = torch.ones(4, requires_grad=True)
    u, s, v = power_iteration(q, v0, 3)
    assert (u == 0).all() and (s == 0).all() and (v == 0).all()
    grads = torch.autograd.grad((u.sum() + s.sum() + v.sum()), (q, v0))
    assert all(torch.isfinite(t).all() for t in grads)


# ---------------------------------------------------------------------------------------------
# approximate svPN (Eq. 7-8)


@settings(max_examples=15)
@given(shape=st.sampled_from([(), (2,)]), m=st.integers(1, 5), n=st.integers(1, 5), alpha=alphas, seed=seeds)
def test_svpn_approx_with_all_singular_values_converges_to_exact(shape, m, n, alpha, seed):
    q = separated(shape, m, n, gen(seed), ratio=1.5)
    out = svpn_approx(q, alpha, num_sv=min(m, n), iters=200)
    np.testing.assert_allclose(out.numpy(), svpn_reference(q, alpha), rtol=1e-8, atol=1e-8)


@given(shape=batches, m=dims, n=dims, alpha=alphas, iters=st.integers(1, 4), seed=seeds)
def test_svpn_approx_one_singular_value_is_q_over_s_power(shape, m, n, alpha, iters, seed):
    g = gen(seed)
    q = torch.randn(*shape, m, n, generator=g, dtype=F64)
    ones = torch.full((n,), n**-0.5, dtype=F64)
    _, s, _ = power_iteration(q, ones, iters)
    expected = q / s[..., None, None] ** (1 - alpha)
    assert torch.allclose(svpn_approx(q, alpha, 1, iters), expected, rtol=1e-10, atol=1e-12)
    assert torch.allclose(svpn_approx(q, alpha, 1, iters, released_form=True), expected, rtol=1e-9, atol=1e-11)


@given(shape=batches, m=dims, n=dims, alpha=alphas, num_sv=st.integers(1, 6), iters=st.integers(1, 3),
       eps=st.sampled_from([0.0, 1e-5, 0.1]), learnable=st.booleans(), seed=seeds)
def test_svpn_approx_matches_eq_8_and_released_form(shape, m, n, alpha, num_sv, iters, eps, learnable, seed):
    g = gen(seed)
    q = torch.randn(*shape, m, n, generator=g, dtype=F64)
    r = min(num_sv, m, n)
    v0 = torch.randn(n, generator=g, dtype=F64) if learnable else torch.full((n,), n**-0.5, dtype=F64)
    # Eq. 7 deflation and Eq. 8, written out with the (separately tested) power iteration
    rest, triples = q, []
    for _ in range(r):
        u, s, v = power_iteration(rest, v0, iters)
        uv = u[..., :, None] * v[..., None, :]
        triples.append((s[..., None, None], uv))
        rest = rest - s[..., None, None] * uv
    assume(r == 1 or iters >= 2)  # see the test below
    # where a deflated estimate is at rounding level Eq. 8 divides noise by ~0 (the op floors it)
    assume(all((s > 1e-6 * triples[0][0]).all() for s, _ in triples))
    head = sum((s**alpha * uv for s, uv in triples[:-1]), torch.zeros_like(q))
    before_last = q - sum((s * uv for s, uv in triples[:-1]), torch.zeros_like(q))
    s_r, uv_r = triples[-1]
    eq8 = head + before_last / (s_r ** (1 - alpha) + eps)
    released = head + s_r**alpha * uv_r + (before_last - s_r * uv_r) / (s_r ** (1 - alpha) + eps)
    kwargs = dict(alpha=alpha, num_sv=r, iters=iters, v0=None if not learnable else v0, eps=eps)
    assert torch.allclose(svpn_approx(q, **kwargs), eq8, rtol=1e-8, atol=1e-9)
    assert torch.allclose(svpn_approx(q, released_form=True, **kwargs), released, rtol=1e-8, atol=1e-9)


@given(shape=batches, m=st.integers(1, 6), n=st.integers(1, 6), seed=seeds, ones=st.booleans())
def test_one_iteration_deflation_annihilates_the_shared_start_vector(shape, m, n, seed, ones):
    """With iters = 1: u_1 = Q v0 / |Q v0|, s_1 = |Q^T u_1|, v_1 = Q^T u_1 / s_1, so v_1^T v0 = |Q v0| / s_1
    and Q' v0 = Q v0 - s_1 u_1 (v_1^T v0) = 0. The next power iteration from the same v0 starts from
    0 / 0: for r >= 2, one iteration (Table 4c's (2, 1), (3, 1)) gives rounding-noise directions."""
    g = gen(seed)
    q = torch.randn(*shape, m, n, generator=g, dtype=F64)
    v0 = torch.full((n,), n**-0.5, dtype=F64) if ones else torch.randn(n, generator=g, dtype=F64)
    u, s, v = power_iteration(q, v0, 1)
    deflated = q - s[..., None, None] * u[..., :, None] * v[..., None, :]
    residual = torch.linalg.vector_norm(deflated @ v0, dim=-1)
    assert (residual <= 1e-12 * torch.linalg.matrix_norm(q) * torch.linalg.vector_norm(v0)).all()


def test_svpn_approx_released_form_differs_from_eq_8_only_through_eps():
    q = torch.randn(3, 6, 6, generator=gen(5), dtype=F64)
    a = svpn_approx(q, eps=1e-5, released_form=True)
    b = svpn_approx(q, eps=1e-5)
    assert not torch.allclose(a, b, rtol=0, atol=1e-12)
    assert torch.allclose(svpn_approx(q, eps=0.0, released_form=True), svpn_approx(q, eps=0.0))


@pytest.mark.parametrize("released_form", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_svpn_approx_zero_and_rank_deficient_inputs_stay_finite(dtype, released_form):
    v0 = torch.ones(4, dtype=dtype, requires_grad=True)
    for q in (torch.zeros(2, 3, 4, dtype=dtype), torch.outer(torch.arange(3.0), torch.ones(4)).to(dtype)):
        q = q.requires_grad_()
        for num_sv in (1, 3):
            out = svpn_approx(q, num_sv=num_sv, iters=2, v0=v0, eps=1e-5, released_form=released_form)
            assert torch.isfinite(out).all()
            grads = torch.autograd.grad(out.sum(), (q, v0))
            assert all(torch.isfinite(t).all() for t in grads)
    zero = svpn_approx(torch.zeros(3, 3, dtype=dtype), num_sv=2)  # eps = 0: 0 / 0 made 0
    assert (zero == 0).all()


def test_svpn_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_sv"):
        svpn_approx(torch.zeros(3, 4), num_sv=4)
    with pytest.raises(ValueError, match="iters"):
        power_iteration(torch.zeros(3, 4), torch.ones(4), 0)
    with pytest.raises(ValueError, match="eps"):
        svpn_exact(torch.zeros(3, 4), eps=0.0)


# ---------------------------------------------------------------------------------------------
# EPN (Table 4d) and iSQRT (Table 3b's GCP)


@given(shape=batches, d=st.integers(1, 40), seed=seeds)
def test_epn_is_unit_norm_signed_sqrt(shape, d, seed):
    g = gen(seed)
    x = torch.randn(*shape, d, generator=g, dtype=F64) * torch.rand(1, generator=g, dtype=F64) * 10
    x = torch.where(x.abs() < 1e-3, torch.full_like(x, 1e-3), x)
    out = epn(x)
    assert torch.allclose(torch.linalg.vector_norm(out, dim=-1), torch.ones(shape, dtype=F64))
    assert (torch.sign(out) == torch.sign(x)).all()
    root = np.sign(x.numpy()) * np.sqrt(np.abs(x.numpy()))
    np.testing.assert_allclose(out.numpy(), root / np.linalg.norm(root, axis=-1, keepdims=True), rtol=1e-7)


def test_epn_zero_and_tiny_inputs():
    x = torch.tensor([[0.0, 0.0, 0.0], [1e-30, -1e-30, 0.0]], dtype=F64, requires_grad=True)
    out = epn(x)
    assert (out[0] == 0).all()
    assert (torch.sign(out) == torch.sign(x)).all()
    (grad,) = torch.autograd.grad(out.sum(), x)
    assert torch.isfinite(grad).all()


@given(shape=batches, n=st.integers(1, 6), cond=st.floats(1.0, 10.0), seed=seeds)
def test_isqrt_squared_is_its_input(shape, n, cond, seed):
    g = gen(seed)
    scale = 10 ** (torch.rand(1, generator=g, dtype=F64) * 4 - 2)  # trace normalisation: any scale
    mats = []
    for _ in range(int(np.prod(shape))):
        eig = scale * (1 + (cond - 1) * torch.rand(n, generator=g, dtype=F64))
        rot = orthonormal(n, n, g)
        mats.append(rot @ torch.diag(eig) @ rot.T)
    sigma = torch.stack(mats).reshape(*shape, n, n)
    root = isqrt_cov(sigma, iters=25)
    assert torch.allclose(root @ root, sigma, rtol=1e-9, atol=1e-9 * scale.item())
    w, vecs = torch.linalg.eigh(sigma)
    assert torch.allclose(root, vecs @ torch.diag_embed(w.sqrt()) @ vecs.mT, rtol=1e-9, atol=1e-9 * scale.item())
    # a few iterations already get close, and more iterations never get worse (well-conditioned)
    err = [torch.linalg.matrix_norm(isqrt_cov(sigma, k) @ isqrt_cov(sigma, k) - sigma).max() for k in (3, 6, 12)]
    slack = 1e-12 * scale.item()  # once converged, rounding noise
    assert err[0] + slack >= err[1] and err[1] + slack >= err[2]


def test_isqrt_is_differentiable_and_float32():
    x = torch.randn(4, 50, 6, generator=gen(2))
    sigma = covariance(x).requires_grad_()
    root = isqrt_cov(sigma, iters=5)
    assert root.dtype == torch.float32 and root.shape == sigma.shape
    (grad,) = torch.autograd.grad(root.sum(), sigma)
    assert torch.isfinite(grad).all()
    assert torch.isfinite(isqrt_cov(torch.zeros(3, 3))).all()
