"""DHVT's table entries: the module of each of its kinds (`vspec.compiler`) and the converters of the released
code (`vspec.convert.from_official`)."""

from . import convert, modules, spec

MODULES = {
    spec.SOPE: modules.SOPE,
    spec.DAFF: modules.DAFF,
    spec.HeadTokenBlock: modules.HeadTokenBlock,
}
CONVERTERS = {"dhvt": convert.DHVT}
