"""Refiner's table entries: the module of each of its kinds (`vspec.compiler`) and the converters of the released
code (`vspec.convert.from_official`)."""

from . import convert, modules, spec

MODULES = {
    spec.ConvStem: modules.ConvStem,
    spec.RefinerAttention: modules.RefinerAttention,
    spec.AdjustedBlock: modules.AdjustedBlock,
}
CONVERTERS = {"refiner": convert.REFINER}
