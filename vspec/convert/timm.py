"""timm VisionTransformer (ViT / DeiT) weights -> vspec."""

from collections.abc import Mapping

import torch
from torch import nn

from .. import spec as S
from ..compiler import build
from .common import load_mapped, renamer

# timm name prefix -> vspec name prefix (everything else keeps its name)
_RENAMES = [
    (r"^patch_embed\.proj\.", "embedder.proj."),
    (r"^blocks\.(\d+)\.mlp\.", r"blocks.\1.ffn."),
    (r"^blocks\.(\d+)\.ls([12])\.gamma$", r"blocks.\1.ls\2.gamma"),
    (r"^head\.", "head.fc."),
    (r"^fc_norm\.", "head.norm."),
]


timm_key = renamer(_RENAMES)


def from_timm(model_or_state_dict: nn.Module | Mapping[str, torch.Tensor], spec: S.Model) -> nn.Module:
    """Build `spec` and load a timm ViT's weights (a timm model or its state_dict) into it.

    Raises ConversionError naming unmatched keys or shapes when the spec does not describe the
    checkpoint's architecture."""
    state = model_or_state_dict.state_dict() if isinstance(model_or_state_dict, nn.Module) else model_or_state_dict
    return load_mapped(build(spec), state, timm_key)
