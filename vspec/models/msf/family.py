"""MSF's table entries: the module of each of its kinds (`vspec.compiler`) and the converters of the released
code (`vspec.convert.from_official`), named by dotted path: reading the table imports no conversion."""

from . import modules, spec

__all__ = ["CONVERTERS", "MODULES"]

MODULES = {
    spec.MeanShiftAttention: modules.MeanShiftAttention,
    spec.WindowMeanShiftAttention: modules.WindowMeanShiftAttention,
}
CONVERTERS = {"msf": "vspec.models.msf.convert:MSF"}
