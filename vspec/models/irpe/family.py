"""iRPE's table entries: the module of each of its kinds (`vspec.compiler`) and the converters of the released
code (`vspec.convert.from_official`)."""

from . import convert, modules, spec

MODULES = {
    spec.IRPEAttention: modules.IRPEAttention,
}
CONVERTERS = {"irpe": convert.IRPE}
