"""benchmarks/msf.py: its reference is the released formulation of the Gaussian kernel, every variant it
races equals it (outputs and gradients), and the memory claim holds: vspec's attention keeps no n x n map,
so its peak is a small fraction of the reference's (bytes, not time)."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import benchmarks.msf


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 12), d=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_reference_is_the_gaussian_kernel(n, d, seed):
    """softmax_i(-1/2 |q - k_i|^2 d^-1/2) v written out in float64 (Eq. 12's attention, footnote 2)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    dist = (q[..., :, None, :] - k[..., None, :, :]).square().sum(-1)
    torch.testing.assert_close(benchmarks.msf.reference(q, k, v), (-0.5 * dist * d**-0.5).softmax(-1) @ v)


def test_every_variant_runs_and_equals_the_reference(capsys):
    """race_cores and race_module assert outputs and gradients equal to the reference before timing."""
    b = benchmarks.msf
    b.race_cores(2, 20, 1, "cpu")
    b.race_module(1, 16, 1, "cpu")
    out = capsys.readouterr().out
    for name in (*b.CORES, "kernel"):
        assert f"  {name} " in out
    assert "MeanShiftAttention module, batch 1 x 16 tokens" in out


def test_vspec_peak_memory_is_a_fraction_of_the_reference():
    """At 1024 tokens (6 heads) the reference holds (1024 x 1024) maps for backward; vspec holds O(n)."""
    b = benchmarks.msf
    g = torch.Generator().manual_seed(0)
    leaves = [torch.randn(1, b.HEADS, 1024, b.HEAD_DIM, generator=g).requires_grad_() for _ in range(3)]
    grad = torch.randn(1, b.HEADS, 1024, b.HEAD_DIM, generator=g)
    peak = {name: b.peak_bytes(lambda fn=fn: b.step(fn, leaves, grad), "cpu")
            for name, fn in (("reference", b.reference), ("vspec", b.gaussian_attention))}
    assert peak["reference"] >= 3 * b.HEADS * 1024 * 1024 * 4  # sanity: three float32 maps live at once
    assert peak["vspec"] <= peak["reference"] / 4
