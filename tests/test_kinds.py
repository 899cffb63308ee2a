"""Every component kind has a module in the compiler's table, a test strategy that draws models using it
with its options, one that breaks them (tests/test_hardening_spec.py), and full profiler coverage; adding a
kind without them fails here."""

import attrs
import pytest
import torch
from conftest import assert_every_parameter_learns
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import KIND_MODELS, KIND_RULES

import vspec
from vspec.compiler import modules
from vspec.profiler import _flop_counter_mapping
from vspec.spec import KINDS, Model

COMPONENTS = sorted(KINDS.values(), key=lambda c: c.__name__)  # every role's kinds, the block kinds too


def test_every_kind_has_a_module_and_a_strategy():
    assert set(COMPONENTS) | {Model} <= set(modules()), "a kind without a module in vspec.compiler's table"
    assert set(KIND_MODELS) == set(COMPONENTS), "a kind without a strategy in tests/strategies.py:KIND_MODELS"
    assert set(KIND_RULES) == set(COMPONENTS), "a kind without invalid specs in tests/strategies.py:KIND_RULES"


def uses(spec, cls) -> bool:
    """Whether an instance of `cls` sits anywhere in the spec tree."""
    if isinstance(spec, cls):
        return True
    if isinstance(spec, tuple):
        return any(uses(v, cls) for v in spec)
    return attrs.has(type(spec)) and any(uses(getattr(spec, f.name), cls) for f in attrs.fields(type(spec)))


@pytest.mark.parametrize("cls", COMPONENTS, ids=lambda c: c.__name__)
@settings(max_examples=6)
@given(data=st.data())
def test_every_kind_builds_trains_and_is_fully_counted(cls, data):
    exercise(data.draw(KIND_MODELS[cls]), cls)


def exercise(spec: Model, cls: type) -> None:
    """A model using `cls`: its files reload, it builds, every parameter learns, and the profiler counts all of
    it (parameters equal the module's, fvcore's MACs equal FlopCounterMode's, the parts add up to the whole)."""
    assert uses(spec, cls)
    assert vspec.from_json(vspec.to_json(spec)) == spec and vspec.from_toml(vspec.to_toml(spec)) == spec
    torch.manual_seed(0)
    model = vspec.build(spec).eval().double()
    out = model(vspec.example_input(spec, 2, dtype=torch.float64))
    (out * torch.randn_like(out)).sum().backward()
    assert_every_parameter_learns(model)
    model.float()
    x = vspec.example_input(spec, 2)
    prof = vspec.profile(spec)
    assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs
    assert prof.params == sum(p.numel() for p in model.parameters())
    from torch.utils.flop_counter import FlopCounterMode

    mode = FlopCounterMode(display=False, custom_mapping=_flop_counter_mapping())
    with mode, torch.no_grad():
        model(x[:1])
    assert mode.get_total_flops() // 2 == prof.macs  # the parts add up to the whole
