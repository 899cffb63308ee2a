"""timm weights -> vspec: VisionTransformer (ViT / DeiT) and SwinTransformer."""

from collections.abc import Mapping

import torch
from torch import nn

from .. import spec as specs
from ..compiler import build
from .common import load_mapped, renamer

# timm name -> vspec name (everything else keeps its name: cls_token, pos_embed, norm.*)
RULES = [
    (r"^patch_embed\.", "embedder."),
    (r"^blocks\.(\d+)\.mlp\.", r"stages.0.blocks.\1.ffn."),  # ViT: one stage
    (r"^blocks\.", "stages.0.blocks."),
    (r"^layers\.(\d+)\.downsample\.", r"stages.\1.entry."),  # Swin: a stage per layer
    (r"^layers\.(\d+)\.blocks\.(\d+)\.mlp\.", r"stages.\1.blocks.\2.ffn."),
    (r"^layers\.", "stages."),
    (r"^head\.fc\.", "head.fc."),
    (r"^head\.", "head.fc."),
    (r"^fc_norm\.", "head.norm."),
]


timm_key = renamer(RULES)


def from_timm(model_or_state_dict: nn.Module | Mapping[str, torch.Tensor], spec: specs.Model) -> nn.Module:
    """Build `spec` and load a timm ViT's or Swin's weights (a timm model or its state_dict) into it; the model comes
    back in eval mode, as every loader's (`vspec.create_model` stays timm's: train mode).

    Raises ConversionError naming unmatched keys or shapes when the spec does not describe the
    checkpoint's architecture."""
    state = model_or_state_dict.state_dict() if isinstance(model_or_state_dict, nn.Module) else model_or_state_dict
    return load_mapped(build(spec), state, timm_key).eval()
