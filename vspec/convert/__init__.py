"""Checkpoint converters: other projects' weights into vspec modules (timm; Hugging Face's language models,
`from_hf` / `spec_from_hf`; the papers' released code, `from_official`, whose converters are the families'
(`vspec/models/<family>/family.py: CONVERTERS`, each named by its dotted path "package.module:NAME" and imported
only when it runs), each a `Released` record), and vspec models back out: `to_hf` (a folder transformers reads
without vspec) and `to_timm` (a state-dict file timm loads strictly)."""

import pkgutil
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .._moved import moved as _moved
from ..spec import families
from .common import ConversionError, ConversionNote, load_mapped
from .hf import from_hf, spec_from_hf
from .hf_export import to_hf
from .released import Released
from .timm import TimmModel, from_timm, to_timm

__all__ = ["ConversionError", "ConversionNote", "Released", "TimmModel", "from_hf", "from_official", "from_timm",
           "load_mapped", "official", "spec_from_hf", "to_hf", "to_timm"]


def _resolve(name: str, path: Any) -> Any:
    """The converter a family's table names by dotted path ("package.module:NAME"), imported now."""
    if not isinstance(path, str):
        raise ConversionError(f"converter {name!r}: a family names it by dotted path ('package.module:NAME'), "
                              f"got a {type(path).__name__}")
    return pkgutil.resolve_name(path)


def official() -> dict[str, Any]:
    """name -> converter(state_dict, config, **options) of every family's released code (each imported now)."""
    return {name: _resolve(name, path) for name, path in families.tables("CONVERTERS").items()}


def from_official(family: str, state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any],
                  **options: Any) -> nn.Module:
    """Build the vspec model of a paper's released model (`config`: its constructor arguments, as
    stored in the fixtures) and load `state_dict` (official parameter names) into it. `options` go to the
    family's converter (sot_text: `body=`, the text spec a head alone sits on). The model comes back in eval mode,
    as every loader's.

    Args:
        family: the converter's name in a family's `CONVERTERS` (`official()` lists them).
        state_dict: the released checkpoint's weights, under their official names.
        config: the released model's constructor arguments.
        **options: the family converter's own keywords.
    """
    paths = families.tables("CONVERTERS")
    if family not in paths:
        raise ConversionError(f"unknown family {family!r}; known: {', '.join(paths)}")
    return _resolve(family, paths[family])(state_dict, config, **options).eval()


def __getattr__(name: str):  # the previous release's names (vspec/_moved.py)
    return _moved(__name__, name)
