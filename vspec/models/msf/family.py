"""MSF's table entries: the module of each of its kinds (`vspec.compiler`) and the converters of the released
code (`vspec.convert.from_official`)."""

from . import convert, modules, spec

MODULES = {
    spec.MeanShiftAttention: modules.MeanShiftAttention,
    spec.WindowMeanShiftAttention: modules.WindowMeanShiftAttention,
}
CONVERTERS = {"msf": convert.MSF}
