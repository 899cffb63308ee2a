"""The toy family's table entries, its converter and its presets' folder."""

from pathlib import Path

from . import modules, spec

MODULES = {spec.GLUFFN: modules.GLUFFN, spec.GatedBlock: modules.GatedBlock, spec.TracedBlock: modules.TracedBlock,
           spec.TraceHead: modules.TraceHead}
CONVERTERS = {"toy": "tests.toy_family.convert:TOY"}  # by dotted path, imported when it runs
PRESETS = Path(__file__).with_name("presets")
