"""The families: one folder per paper (`vspec/models/<family>/`), each with `spec.py` (its kinds, torch-free),
`modules.py`, `ops.py` where it has functions, `convert.py` (the released code's weights) and `family.py` (its table
entries: `MODULES`, the module of each kind; `CONVERTERS`, `vspec.convert.from_official`'s, by dotted path
("package.module:NAME", imported when one runs); optionally `FVCORE_HANDLES`, the profiler's count of an op it
emits, and `PRESETS`, a folder of presets). The core (vspec/spec, vspec/nn, vspec/ops, vspec/convert) names no
family: `vspec.spec.families` finds the packages here, those of the `vspec.families` entry-point group, and those
given to `vspec.register_family`. A family imports the core, never another family."""

__all__ = []
