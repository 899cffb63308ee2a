"""DHVT's table entries: the module of each of its kinds (`vspec.compiler`) and the converters of the released
code (`vspec.convert.from_official`), named by dotted path: reading the table imports no conversion."""

from . import modules, spec

__all__ = ["CONVERTERS", "MODULES"]

MODULES = {
    spec.SOPE: modules.SOPE,
    spec.DAFF: modules.DAFF,
    spec.HeadTokenBlock: modules.HeadTokenBlock,
}
CONVERTERS = {"dhvt": "vspec.models.dhvt.convert:DHVT"}
