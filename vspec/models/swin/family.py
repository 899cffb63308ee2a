"""Swin's table entries: the module of each of its kinds (`vspec.compiler`). Its weights convert from timm
(`vspec.convert.from_timm`)."""

from . import modules, spec

MODULES = {spec.WindowMHSA: modules.WindowMHSA, spec.PatchMerging: modules.PatchMerging}
