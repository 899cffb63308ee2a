"""Checkpoint converters: other projects' weights into vspec modules (timm; Hugging Face's language models,
`from_hf` / `spec_from_hf`; the papers' released code, `from_official`)."""

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .common import ConversionError, ConversionNote, load_mapped
from .conformer import from_official_conformer
from .dhvt import from_official_dhvt
from .hf import from_hf, spec_from_hf
from .irpe import from_official_irpe
from .msf import from_official_msf
from .refiner import from_official_refiner
from .sot import from_official_sot
from .sot_text import from_official_sot_text
from .t2t import from_official_t2t
from .timm import from_timm

# family -> converter(state_dict, config) for the papers' released code
OFFICIAL = {"sot": from_official_sot, "sot_text": from_official_sot_text, "dhvt": from_official_dhvt,
            "msf": from_official_msf, "refiner": from_official_refiner, "t2t": from_official_t2t,
            "irpe": from_official_irpe,
            "conformer": from_official_conformer}


def from_official(family: str, state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any],
                  **options: Any) -> nn.Module:
    """Build the vspec model of a paper's released model (`config`: its constructor arguments, as
    stored in the fixtures) and load `state_dict` (official parameter names) into it. `options` go to the
    family's converter (sot_text: `body=`, the text spec a head alone sits on)."""
    if family not in OFFICIAL:
        raise ConversionError(f"unknown family {family!r}; known: {', '.join(OFFICIAL)}")
    return OFFICIAL[family](state_dict, config, **options)


__all__ = ["OFFICIAL", "ConversionError", "ConversionNote", "from_hf", "from_official", "from_timm", "load_mapped",
           "spec_from_hf"]
