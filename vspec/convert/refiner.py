"""The Refiner authors' released models (Refined-ViT, models/refined_transformer.py:Refiner_ViT) -> vspec.

`config`: img_size, patch_size, embed_dim, depth (a list of booleans: True = a shared block),
apply_transform (a list of booleans), num_heads, mlp_ratio, qkv_bias, head_expand, num_classes,
return_dense (the dense auxiliary head, `DenseAux`), mix_token (MixToken acts in training only; eval is
unchanged, and vspec does not implement it). Released-code
facts it encodes: the CNN patch stem, LayerNorm eps 1e-6, blocks x + 2 f(LN(x / 2)), an MLP output scale,
shared blocks refining the incoming maps with DLA expansion 3 (`released_attention`).
"""

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from .. import spec as S
from ..compiler import build
from .common import ConversionError, load_mapped, renamer


def released_attention(heads: int, share: bool, first: bool, transform: bool = False, head_expand: int = 3,
                       qkv_bias: bool = True) -> S.RefinerAttention:
    """A Refined-ViT block's attention as the released constructor builds it: a shared block (`share`)
    reuses the incoming maps and refines them (DLA expansion 3 in every released block, whatever
    `head_expand` says); a compute block adds scale x the incoming maps (all but the `first`) and, with
    `transform` (`apply_transform`, on in no released factory), refines its own maps with `head_expand`."""
    if share:
        return S.RefinerAttention(heads=heads, qkv_bias=qkv_bias, form="released", reuse=True,
                                  refine=S.Refine(expansion=3, form="released"))
    refine = S.Refine(expansion=head_expand, form="released") if transform else None
    return S.RefinerAttention(heads=heads, qkv_bias=qkv_bias, form="released", refine=refine, add_incoming=not first)


def released_blocks(pattern: Sequence[bool], heads: int, transform: Sequence[bool] | None = None,
                    head_expand: int = 3, qkv_bias: bool = True,
                    mlp_ratio: float = 3.0) -> tuple[S.Block, ...]:
    """Refined-ViT's blocks: `pattern[i]` True for a shared block (the released factories alternate
    [False, True]), LayerNorm eps 1e-6, x + 2 f(LN(x / 2)), an MLP (ratio 3) with output scale 1e-5."""
    transform = transform or [False] * len(pattern)
    if len(transform) != len(pattern):
        raise ConversionError(f"Refiner config: depth has {len(pattern)} blocks, apply_transform {len(transform)}")
    ffn = S.MLP(ratio=float(mlp_ratio), layer_scale=1e-5)
    return tuple(S.Block(attention=released_attention(heads, share, i == 0, t, head_expand, qkv_bias),
                         ffn=ffn, norm=S.Norm(eps=1e-6), adjust_ratio=0.5)
                 for i, (share, t) in enumerate(zip(pattern, transform)))


def spec_from_config(config: Mapping[str, Any]) -> S.Model:
    try:
        blocks = released_blocks(list(config["depth"]), config["num_heads"], list(config["apply_transform"]),
                                 config["head_expand"], qkv_bias=bool(config.get("qkv_bias", False)),
                                 mlp_ratio=config["mlp_ratio"])
        head = S.ClassTokenHead(dense=S.DenseAux() if config.get("return_dense", False) else None)
        return S.Model(embedder=S.ConvStem(patch_size=config["patch_size"]), block=blocks, head=head,
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
    (r"^aux_head\.", "head.aux."),
])


def from_official_refiner(state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> nn.Module:
    return load_mapped(build(spec_from_config(config)), state_dict, _rename)
