"""The Refiner authors' released models (Refined-ViT, models/refined_transformer.py:Refiner_ViT) -> vspec.

`config`: img_size, patch_size, embed_dim, depth (a list of booleans: True = a shared block),
apply_transform (a list of booleans), num_heads, mlp_ratio, qkv_bias, head_expand, num_classes,
return_dense, mix_token (MixToken and relabelling act in training only; eval is unchanged). Released-code
facts it encodes: the CNN patch stem, LayerNorm eps 1e-6, blocks x + 2 f(LN(x / 2)), an MLP output scale,
shared blocks refining the incoming maps with DLA expansion 3 (`vspec.spec.refiner.released_attention`).
"""

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .. import spec as S
from ..compiler import build
from ..spec.refiner import released_attention
from .common import ConversionError, load_mapped, renamer


def spec_from_config(config: Mapping[str, Any]) -> S.Model:
    try:
        pattern, transform = list(config["depth"]), list(config["apply_transform"])
        if len(transform) != len(pattern):
            raise ConversionError(f"Refiner config: depth has {len(pattern)} blocks, apply_transform {len(transform)}")
        ln = S.Norm(eps=1e-6)
        ffn = S.MLP(ratio=float(config["mlp_ratio"]), layer_scale=1e-5)
        blocks = [S.Block(attention=released_attention(config["num_heads"], share, i == 0, t, config["head_expand"],
                                                       qkv_bias=bool(config.get("qkv_bias", False))),
                          ffn=ffn, norm=ln, adjust_ratio=0.5)
                  for i, (share, t) in enumerate(zip(pattern, transform))]
        return S.Model(embedder=S.ConvStem(patch_size=config["patch_size"]), block=blocks,
                       dim=config["embed_dim"], num_classes=config["num_classes"], img_size=config["img_size"])
    except KeyError as e:
        raise ConversionError(f"Refiner config: missing {e}") from None


_rename = renamer([
    (r"^patch_embed\.", "embedder."),
    (r"^blocks\.(\d+)\.attn\.DLA\.", r"stages.0.blocks.\1.attn.core.refine."),
    (r"^blocks\.(\d+)\.attn\.adapt_bn\.", r"stages.0.blocks.\1.attn.core.refine.adapt_bn."),
    (r"^blocks\.(\d+)\.mlp\.scale_channel$", r"stages.0.blocks.\1.ffn.ls.gamma"),
    (r"^blocks\.(\d+)\.mlp\.", r"stages.0.blocks.\1.ffn."),
    (r"^blocks\.(\d+)\.", r"stages.0.blocks.\1."),
    (r"^head\.", "head.fc."),
])


def from_official_refiner(state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> nn.Module:
    return load_mapped(build(spec_from_config(config)), state_dict, _rename)
