"""Conformer's table entries: the module of each of its kinds (`vspec.compiler`) and the converters of the released
code (`vspec.convert.from_official`), named by dotted path: reading the table imports no conversion."""

from . import modules, spec

__all__ = ["CONVERTERS", "MODULES"]

MODULES = {
    spec.ConformerStem: modules.ConformerStem,
    spec.ConvBranch: modules.ConvBranch,
    spec.CoupledBlock: modules.CoupledBlock,
    spec.ConformerHead: modules.ConformerHead,
}
CONVERTERS = {"conformer": "vspec.models.conformer.convert:CONFORMER"}
