"""Conformer's table entries: the module of each of its kinds (`vspec.compiler`) and the converters of the released
code (`vspec.convert.from_official`)."""

from . import convert, modules, spec

MODULES = {
    spec.ConformerStem: modules.ConformerStem,
    spec.ConvBranch: modules.ConvBranch,
    spec.CoupledBlock: modules.CoupledBlock,
    spec.ConformerHead: modules.ConformerHead,
}
CONVERTERS = {"conformer": convert.CONFORMER}
