"""Refiner's table entries: the module of each of its kinds (`vspec.compiler`) and the converters of the released
code (`vspec.convert.from_official`), named by dotted path: reading the table imports no conversion."""

from . import modules, spec

__all__ = ["CONVERTERS", "MODULES"]

MODULES = {
    spec.RefinerAttention: modules.RefinerAttention,
    spec.AdjustedBlock: modules.AdjustedBlock,
}
CONVERTERS = {"refiner": "vspec.models.refiner.convert:REFINER"}
