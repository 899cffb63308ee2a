"""vspec/ops/dropout.py: the keep mask drawn as 16-bit uniforms, four per 64-bit word, against the Bernoulli
distribution it stands for (rates, lanes, neighbours), and `dropout` against y = x * keep / P(keep) written out."""

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import nn

from vspec.ops import fast
from vspec.ops.dropout import Dropout, dropout, keep_mask, keep_probability


def within(rate: float, expected: float, n: int, sigmas: float = 5.0) -> bool:
    """A binomial rate over n draws within `sigmas` standard deviations of `expected`."""
    return abs(rate - expected) <= sigmas * (expected * (1 - expected) / n) ** 0.5


def test_the_keep_probability_is_one_minus_p_at_the_uniforms_resolution():
    assert keep_probability(0.1) == 1 - 6554 / 65536
    assert keep_probability(0.5) == 0.5
    assert keep_probability(0.0) == 1.0 and keep_probability(1.0) == 0.0
    assert abs(keep_probability(0.3) - 0.7) <= 2**-17


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_the_mask_keeps_at_its_rate_in_every_lane_of_a_word_and_neighbours_are_independent(p):
    torch.manual_seed(0)
    n = 1 << 20
    keep = keep_mask((n,), p).double()
    k = keep_probability(p)
    assert keep.dtype == torch.float64 and within(keep.mean().item(), k, n)
    for lane in range(4):  # the four 16-bit slices of a word each keep at the rate
        assert within(keep[lane::4].mean().item(), k, n // 4)
    for gap in (1, 2, 3, 4):  # within a word (1-3) and across words (4): P(both kept) = k^2
        assert within((keep[:-gap] * keep[gap:]).mean().item(), k * k, n - gap)


def test_the_mask_has_the_shape_asked_and_a_seed_repeats_it():
    torch.manual_seed(3)
    a = keep_mask((3, 5, 7), 0.2)
    torch.manual_seed(3)
    b = keep_mask((3, 5, 7), 0.2)
    assert a.shape == (3, 5, 7) and a.dtype == torch.bool and torch.equal(a, b)
    assert not torch.equal(a, keep_mask((3, 5, 7), 0.2))  # the generator moved on


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int64])
def test_a_mask_in_a_dtype_is_the_bool_mask_of_the_same_draw_as_ones_and_zeros(dtype):
    torch.manual_seed(5)
    keep = keep_mask((4, 3, 49, 49), 0.1)
    after_bool = torch.rand(2)
    torch.manual_seed(5)
    ones = keep_mask((4, 3, 49, 49), 0.1, dtype=dtype)
    assert ones.dtype == dtype and ones.shape == keep.shape
    assert torch.equal(ones == 1, keep) and torch.equal(ones == 0, ~keep)
    assert torch.equal(torch.rand(2), after_bool)  # the generator moved on as far


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_dropout_is_x_times_the_keep_mask_over_its_probability_with_that_gradient(dtype):
    x = torch.randn(4, 6, 33, dtype=dtype, requires_grad=True)
    torch.manual_seed(1)
    y = dropout(x, 0.25)
    torch.manual_seed(1)
    keep = keep_mask(x.shape, 0.25)
    scale = 1 / (1 - round(0.25 * 65536) / 65536)
    expected = torch.where(keep, x.detach().double() * scale, 0.0)
    assert y.dtype == dtype
    assert torch.allclose(y.double(), expected, rtol=1e-2 if dtype == torch.bfloat16 else 1e-6)
    g = torch.randn_like(y)
    y.backward(g)
    assert torch.allclose(x.grad.double(), torch.where(keep, g.double() * scale, 0.0),
                          rtol=1e-2 if dtype == torch.bfloat16 else 1e-6)


def test_dropout_is_unbiased():
    torch.manual_seed(0)
    x = torch.ones(1 << 20)
    y = dropout(x, 0.1)
    n, k = x.numel(), keep_probability(0.1)
    assert abs(y.mean().item() - 1) <= 5 * ((1 - k) / (k * n)) ** 0.5  # E[y] = x, the keep rate's noise around it


def test_no_dropout_out_of_training_at_p_zero_and_all_of_it_at_p_one():
    x = torch.randn(5, 7)
    assert dropout(x, 0.4, training=False) is x and dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))


def test_a_p_that_rounds_to_one_is_torchs_dropout():
    x = torch.randn(8, 40)
    p = 1 - 2**-18  # keep probability 0 at 2^-16 resolution: no scale to divide by
    assert keep_probability(p) == 0
    torch.manual_seed(4)
    ours = dropout(x, p)
    torch.manual_seed(4)
    assert torch.equal(ours, F.dropout(x, p))


def test_without_the_fast_paths_it_is_torchs_dropout():
    x = torch.randn(8, 40)
    with fast.fast_paths(False):
        torch.manual_seed(2)
        ours = dropout(x, 0.3)
    torch.manual_seed(2)
    assert torch.equal(ours, F.dropout(x, 0.3))


def test_the_module_is_an_nn_dropout_that_passes_through_in_eval():
    drop = Dropout(0.2)
    x = torch.randn(3, 9)
    assert isinstance(drop, nn.Dropout) and drop.p == 0.2
    assert drop.eval()(x) is x
    torch.manual_seed(0)
    y = drop.train()(x)
    torch.manual_seed(0)
    keep = keep_mask(x.shape, 0.2)
    assert torch.allclose(y, torch.where(keep, x / (1 - round(0.2 * 65536) / 65536), 0.0))


def test_a_probability_outside_zero_to_one_is_refused_as_torch_refuses_it():
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="between 0 and 1"):
            dropout(torch.randn(4), p)


def test_it_differentiates_twice_and_forward_mode():
    """Double backward (gradient penalties, Hessian-vector products) and forward-mode AD go through, as F.dropout's."""
    x = torch.randn(6, 50, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(5)
    (g,) = torch.autograd.grad(dropout(x, 0.3).pow(2).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    torch.manual_seed(5)
    keep = keep_mask(x.shape, 0.3).double() / keep_probability(0.3)
    assert torch.allclose(gg, 2 * keep**2)  # d/dx of 2 (x k) k
    tangent = torch.randn_like(x)
    with fwAD.dual_level():
        torch.manual_seed(5)
        out = dropout(fwAD.make_dual(x.detach(), tangent), 0.3)
        assert torch.allclose(fwAD.unpack_dual(out).tangent, tangent * keep)
