"""Stochastic depth (`vspec.nn.layers.DropPath`) and the residual add through it (`residual`): the one-pass add
draws the same per-sample factors as the module and gives x + drop_path(branch), values and gradients."""

import pytest
import torch
from torch import nn

import vspec
from vspec.nn.layers import DropPath, residual


def _pair(dtype, batch=64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 5, 8, generator=g).to(dtype)
    return x, torch.randn(batch, 5, 8, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_the_one_pass_add_is_the_module_plus_x(dtype):
    """The same seed, the same samples dropped: residual(x, b, dp) == x + dp(b) (one rounding apart in bf16)."""
    x, b = _pair(dtype)
    dp = DropPath(0.3).train()
    torch.manual_seed(1)
    fused = residual(x, b, dp)
    torch.manual_seed(1)
    plain = x + dp(b)
    torch.manual_seed(1)
    with vspec.fast_paths(False):  # the switch gives the plain product and sum
        switched_off = residual(x, b, dp)
    assert torch.equal(switched_off, plain)
    assert fused.dtype == plain.dtype == dtype
    tol = {torch.bfloat16: dict(rtol=1e-2, atol=2e-2)}.get(dtype, dict(rtol=1e-6, atol=1e-6))
    torch.testing.assert_close(fused, plain, **tol)


def test_each_sample_is_kept_scaled_or_dropped_whole():
    """Eq. of stochastic depth: per sample x + b / (1 - p) or x, never a mix; about p of them dropped."""
    x, b = _pair(torch.float64, batch=4000)
    p = 0.25
    torch.manual_seed(2)
    out = residual(x, b, DropPath(p).train())
    kept = torch.isclose(out, x + b / (1 - p)).flatten(1).all(1)
    dropped = torch.isclose(out, x).flatten(1).all(1)
    assert bool((kept ^ dropped).all())
    share = dropped.double().mean().item()
    assert abs(share - p) < 4 * (p * (1 - p) / len(x)) ** 0.5  # four standard deviations of the binomial share


@pytest.mark.parametrize("drop_path", [DropPath(0.3).eval(), DropPath(0.0).train(), nn.Identity()])
def test_outside_training_or_without_a_rate_it_is_the_plain_sum(drop_path):
    x, b = _pair(torch.float32)
    assert torch.equal(residual(x, b, drop_path), x + b)


def test_gradients_are_one_for_the_stream_and_the_factor_for_the_branch():
    """d/dx = 1, d/db = the sample's factor (0 or 1 / (1 - p)), as through the module."""
    x, b = (t.requires_grad_() for t in _pair(torch.float64, batch=256))
    p = 0.5
    torch.manual_seed(3)
    out = residual(x, b, DropPath(p).train())
    out.backward(torch.ones_like(out))
    assert torch.equal(x.grad, torch.ones_like(x))
    factor = (out - x).detach() / b.detach()
    assert torch.allclose(b.grad, factor)
    assert set(b.grad.unique().tolist()) == {0.0, 1 / (1 - p)}


def test_a_float32_stream_stays_float32_with_a_bf16_branch():
    """Under autocast the ViT stream is float32 and the branch bf16: the sum is float32, as x + dp(b) is."""
    x, b = _pair(torch.float32)
    out = residual(x, b.bfloat16(), DropPath(0.2).train())
    assert out.dtype == torch.float32
