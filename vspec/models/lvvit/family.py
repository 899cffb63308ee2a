"""LV-ViT's table entries: the module of its kind (`vspec.compiler`) and the converter of the released code
(`vspec.convert.from_official`), named by dotted path: reading the table imports no conversion."""

from . import modules, spec

__all__ = ["CONVERTERS", "MODULES"]

MODULES = {
    spec.RescaledBlock: modules.RescaledBlock,
}
CONVERTERS = {"lvvit": "vspec.models.lvvit.convert:LVVIT"}
