"""Checks the tests share: the authors' reference outputs (`FIXTURES`) and the tolerance of stored outputs, a
model's every parameter learning, a converter's constructor arguments honoured or refused."""

import os
from pathlib import Path

import pytest

from tests.helpers import ROOT

# the authors' reference outputs (../shared/fixtures/official beside the checkout, or $VSPEC_FIXTURES)
FIXTURES = Path(os.environ.get("VSPEC_FIXTURES",
                               ROOT.parent / "shared" / "fixtures" / "official"))


# Outputs stored on another machine (the authors' fixtures, tests/data/v1) are never compared bit-exactly: the
# float32 kernels of another CPU (AVX-512 or AVX2, another vendor) sum in another order. Measured on one machine,
# capabilities (ATEN_CPU_CAPABILITY default / avx2 / avx512): up to 5.4e-7 on the fixtures, 1.2e-6 on
# tests/data/v1's logits of magnitude 0.4.
# A wrong weight mapping moves an output by 1e-4 and far more (tests/spec/test_format_v1.py checks one).
STORED_ATOL = 1e-5


def assert_close_to_stored(got, stored) -> None:
    """`got`, computed here, equals `stored`, computed on another machine, within STORED_ATOL."""
    diff = (got - stored).abs().max().item()
    assert diff <= STORED_ATOL, f"{diff:.3g} from the stored output (tolerance {STORED_ATOL})"


def assert_same_function(ref, ours, x) -> None:
    """Two models (in eval mode) give equal outputs on `x` and equal input gradients of their squared sum, within
    float32 rounding: the same function, not only the same logits."""
    import torch

    x = x.clone().requires_grad_()
    ref_out, out = ref(x), ours(x)
    assert torch.allclose(ref_out, out, atol=1e-5)
    (grad_ref,) = torch.autograd.grad(ref_out.square().sum(), x)
    (grad,) = torch.autograd.grad(out.square().sum(), x)
    assert torch.allclose(grad_ref, grad, atol=1e-5 * grad.abs().max().item())


def perturbed(model, seed: int = 0):
    """`model` in eval mode with every weight moved off its initial value (LayerNorms off 1 / 0, biases off 0), so
    that a wrong mapping cannot hide behind an init."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    return model.eval()


def assert_every_parameter_learns(model, rel: float | None = None, inert: tuple[str, ...] = ()) -> None:
    """After a backward pass: every parameter has a finite gradient, and none is zero up to rounding:
    its largest entry is above `rel` times the largest gradient entry of the model (default 1e-8 in
    float32; 1e-12 in float64, where a gradient that is zero by an invariance stays ~1e-16 and a small
    real one, behind a layer scale of 1e-5 say, does not). `inert`: the parameters that a released
    architecture cannot train (iRPE's last key table under a class-token head), which must be the dead ones."""
    import torch

    if rel is None:
        rel = 1e-12 if next(model.parameters()).dtype == torch.float64 else 1e-8
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), \
        [n for n, g in grads.items() if g is None or not torch.isfinite(g).all()]
    top = max(g.abs().max().item() for g in grads.values())
    dead = [n for n, g in grads.items() if g.abs().max().item() <= rel * top]
    assert sorted(dead) == sorted(inert), f"zero gradients: {dead}" + (f" (inert: {list(inert)})" if inert else "")


def argument_cases(cases: dict) -> dict:
    """`pytest.mark.parametrize` arguments for a converter's {constructor argument: [(changes, expect), ...]}."""
    return dict(argnames="changes,expect", argvalues=[case for group in cases.values() for case in group],
                ids=[f"{arg}-{i}" for arg, group in cases.items() for i in range(len(group))])


def check_argument(family: str, label: str, state_dict: dict, config: dict, expect) -> None:
    """`expect` a regex: converting `config` is refused in one line `<label> config: <expect>...`; otherwise a
    predicate the spec the converter makes of `config` satisfies (the argument is honoured)."""

    from vspec.convert import ConversionError, from_official, official

    if isinstance(expect, str):
        with pytest.raises(ConversionError, match=f"^{label} config: {expect}") as info:
            from_official(family, state_dict, config)
        assert "\n" not in str(info.value)
    else:
        assert expect(official()[family].spec_of(config))
