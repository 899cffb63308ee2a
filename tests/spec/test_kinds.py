"""Every component kind has a module in the compiler's table, a test strategy that draws models using it
with its options, one that breaks them (tests/spec/test_invalid_specs.py), and full profiler coverage; adding a
kind without them fails here."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.kinds import (
    COMPONENTS,
    exercise,
    uses,  # noqa: F401
)
from tests.helpers.strategies import KIND_MODELS, KIND_RULES
from vspec.compiler import modules
from vspec.spec import Model


def test_every_kind_has_a_module_and_a_strategy():
    assert set(COMPONENTS) | {Model} <= set(modules()), "a kind without a module in vspec.compiler's table"
    assert set(KIND_MODELS) == set(COMPONENTS), ("a kind without a strategy: KIND_MODELS of its family's "
                                                 "tests/models/<family>/strategies.py (the core's: "
                                                 "tests/helpers/strategies.py)")
    assert set(KIND_RULES) == set(COMPONENTS), "a kind without invalid specs: KIND_RULES beside its KIND_MODELS"


@pytest.mark.parametrize("cls", COMPONENTS, ids=lambda c: c.__name__)
@settings(max_examples=6)
@given(data=st.data())
def test_every_kind_builds_trains_and_is_fully_counted(cls, data):
    exercise(data.draw(KIND_MODELS[cls]), cls)


