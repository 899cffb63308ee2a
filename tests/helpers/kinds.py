"""Every component kind (`COMPONENTS`) and the exercise each one passes: built, trained a step, fully counted."""

import attrs
import torch

import vspec
from tests.helpers.checks import assert_every_parameter_learns
from tests.helpers.contracts import assert_contracts
from vspec.profiler import _flop_counter_mapping
from vspec.spec import KINDS, Model

COMPONENTS = sorted(KINDS.values(), key=lambda c: c.__name__)  # every role's kinds, the block kinds too


def exercise(spec: Model, cls: type) -> None:
    """A model using `cls`: its files reload, it builds, its modules keep their contracts (vspec/nn/contracts.py),
    every parameter learns, and the profiler counts all of it (parameters equal the module's, fvcore's MACs equal
    FlopCounterMode's, the parts add up to the whole)."""
    assert uses(spec, cls)
    assert vspec.from_json(vspec.to_json(spec)) == spec and vspec.from_toml(vspec.to_toml(spec)) == spec
    torch.manual_seed(0)
    model = vspec.build(spec).eval().double()
    assert_contracts(model)
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


def uses(spec, cls) -> bool:
    """Whether an instance of `cls` sits anywhere in the spec tree."""
    if isinstance(spec, cls):
        return True
    if isinstance(spec, tuple):
        return any(uses(v, cls) for v in spec)
    return attrs.has(type(spec)) and any(uses(getattr(spec, f.name), cls) for f in attrs.fields(type(spec)))
