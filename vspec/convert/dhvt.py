"""The DHVT authors' released models (DHVT repository, vision_transformer.py:VisionTransformer with
apply_dhvt=True) -> vspec.

`config`: img_size, patch_size, embed_dim, depth, num_heads, mlp_ratio, apply_dhvt, num_classes.
Released-code facts it encodes: SOPE (no conv bias, BatchNorm), DAFF (conv bias, SE reduction 4),
head tokens in every block, no position embedding, qkv bias, LayerNorm eps 1e-6, class-token head.
"""

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .. import spec as S
from ..compiler import build
from .common import ConversionError, load_mapped, renamer


def spec_from_config(config: Mapping[str, Any]) -> S.Model:
    if not config.get("apply_dhvt", True):
        raise ConversionError("DHVT config: apply_dhvt = False is the plain DeiT model; use from_timm")
    try:
        return S.Model(
            embedder=S.SOPE(patch_size=config["patch_size"]),
            block=S.Block(attention=S.MHSA(heads=config["num_heads"]),
                          ffn=S.DAFF(hidden=int(config["embed_dim"] * config["mlp_ratio"])),
                          head_tokens=S.HeadTokens()),
            depth=config["depth"], dim=config["embed_dim"], num_classes=config["num_classes"],
            img_size=config["img_size"], pos_embed="none",
        )
    except KeyError as e:
        raise ConversionError(f"DHVT config: missing {e}") from None


_RULES = [
    (r"^patch_embed\.", "embedder."),
    (r"^blocks\.(\d+)\.attn\.pos_embed$", r"stages.0.blocks.\1.head_tokens.embed"),
    (r"^blocks\.(\d+)\.attn\.ht_proj\.", r"stages.0.blocks.\1.head_tokens.proj."),
    (r"^blocks\.(\d+)\.attn\.ht_norm\.", r"stages.0.blocks.\1.head_tokens.norm."),
    (r"^blocks\.(\d+)\.mlp\.", r"stages.0.blocks.\1.ffn."),
    (r"^blocks\.", "stages.0.blocks."),
    (r"^head\.", "head.fc."),
]


_rename = renamer(_RULES)


def from_official_dhvt(state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> nn.Module:
    return load_mapped(build(spec_from_config(config)), state_dict, _rename)
