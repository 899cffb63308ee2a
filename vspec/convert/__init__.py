"""Checkpoint converters: other projects' weights into vspec modules."""

from .common import ConversionError, load_mapped
from .timm import from_timm

__all__ = ["ConversionError", "from_timm", "load_mapped"]
