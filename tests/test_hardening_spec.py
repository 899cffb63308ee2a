"""Issue 11 (hardening), the spec language's part: no spec that validates builds a zero-sized layer or
a size torch cannot take, options that would do nothing are refused, and error lines stay short. The
fuzz tests here draw models of every component kind (tests/strategies.py: KIND_MODELS) and break them."""

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_every_parameter_learns
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import KIND_MODELS, apply_changes, kind_breakages
from test_kinds import COMPONENTS

import vspec
from vspec.spec import SpecError, from_dict, override, to_dict
from vspec.spec.core import show

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("cls", COMPONENTS, ids=lambda c: c.__name__)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_invalid_specs_of_every_kind_name_the_field(cls, data):
    """A random model using `cls`, broken at one of its fields or rules: from_dict and override both
    refuse it with a SpecError naming the field, in a short line."""
    spec = data.draw(KIND_MODELS[cls])
    changes, path = data.draw(kind_breakages(spec, cls))
    for make in (lambda: from_dict(apply_changes(to_dict(spec), changes)), lambda: override(spec, dict(changes))):
        with pytest.raises(SpecError) as info:
            make()
        assert info.value.path == path, f"{show(changes)}: expected {path!r}, got {info.value}"
        assert len(str(info.value)) < 400, str(info.value)


@pytest.mark.parametrize("cls", COMPONENTS, ids=lambda c: c.__name__)
@settings(max_examples=3, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_valid_specs_of_every_kind_train(cls, data, seed):
    """A random model using `cls` trains a few AdamW steps (train mode) with a finite loss and finite
    gradients, and afterwards every parameter still gets a nonzero gradient (eval mode: in train mode a
    bias before a BatchNorm rightly gets none)."""
    spec = data.draw(KIND_MODELS[cls])
    torch.manual_seed(seed)
    model = vspec.build(spec).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, spec.in_chans, *spec.img_size), torch.randint(0, spec.num_classes, (4,))
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = sum(F.cross_entropy(o, y) for o in (out if isinstance(out, tuple) else (out,)))  # late fusion: a pair
        assert torch.isfinite(loss), loss
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        opt.step()
    model.eval().zero_grad(set_to_none=True)
    out = model(x)
    (out * torch.randn_like(out)).sum().backward()
    assert_every_parameter_learns(model)
