"""The toy family's table entries, its converter and its presets' folder."""

from pathlib import Path

from . import convert, modules, spec

MODULES = {spec.GLUFFN: modules.GLUFFN, spec.GatedBlock: modules.GatedBlock, spec.TracedBlock: modules.TracedBlock,
           spec.TraceHead: modules.TraceHead}
CONVERTERS = {"toy": convert.TOY}
PRESETS = Path(__file__).with_name("presets")
