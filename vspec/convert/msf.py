"""The MSF authors' released models (MSFtransformer, vit_pytorch/simple_vit_flexatt.py:SimpleViTflexAtt)
-> vspec.

`config`: image_size, patch_size, num_classes, dim, depth, heads, mlp_dim, dim_head, att. `att` is
`orig` or `msf`, optionally with `-gN` (N-group interleaved projections, the only grouping that code
reaches). Released-code facts it encodes: SimpleViT (patchify -> LayerNorm -> Linear -> LayerNorm,
fixed 2-D sin-cos position embedding, no class token, mean -> LayerNorm -> Linear head), attention
without biases, LayerNorm eps 1e-5. Its fused `to_qkv` / `to_qkvp` weight is split into one matrix per
role; the untied, ungrouped original keeps timm's fused `qkv`.

Its GroupLinear stores the rows of group g as one block (rows g out/G ... (g + 1) out/G - 1 read input
chunk g) and, interleaved, shuffles the outputs: output o = j G + g is row g out/G + j. vspec stores
row o for output o (which reads chunk o mod G), so the rows are permuted on the way in, over the
fused output (before the chunking into roles, as the released code shuffles it).
"""

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .. import spec as S
from ..compiler import build
from .common import ConversionError, load_mapped, renamer


def _attention(att: Any, heads: int, head_dim: int) -> S.MHSA | S.MeanShiftAttention:
    m = re.fullmatch(r"(orig|msf)(?:-g(\d+))?", att) if isinstance(att, str) else None
    if m is None:
        raise ConversionError(f"MSF config: att must be 'orig' or 'msf', optionally with '-gN'; got {att!r}")
    groups = int(m.group(2) or 1)
    common = dict(heads=heads, head_dim=head_dim, qkv_bias=False, proj_bias=False)
    if m.group(1) == "msf":
        return S.MeanShiftAttention(**common, projections=S.Projections(groups=groups))
    return S.MHSA(**common, projections=S.Projections(groups=groups) if groups > 1 else None)


def spec_from_config(config: Mapping[str, Any]) -> S.Model:
    try:
        ln = S.Norm(eps=1e-5)
        attention = _attention(config["att"], config["heads"], config["dim_head"])
        return S.Model(
            embedder=S.SimplePatchEmbed(patch_size=config["patch_size"], norm=ln),
            block=S.Block(attention=attention, ffn=S.MLP(hidden=config["mlp_dim"]), norm=ln),
            depth=config["depth"], dim=config["dim"], num_classes=config["num_classes"],
            img_size=config["image_size"], class_token=False, pos_embed="sincos2d", final_norm=False,
            head=S.GAPHead(norm=ln),
        )
    except KeyError as e:
        raise ConversionError(f"MSF config: missing {e}") from None


_RULES = [
    (r"^to_patch_embedding\.1\.", "embedder.norm_in."),
    (r"^to_patch_embedding\.2\.", "embedder.proj."),
    (r"^to_patch_embedding\.3\.", "embedder.norm_out."),
    (r"^transformer\.layers\.(\d+)\.0\.norm\.", r"stages.0.blocks.\1.norm1."),
    (r"^transformer\.layers\.(\d+)\.1\.net\.0\.", r"stages.0.blocks.\1.norm2."),
    (r"^transformer\.layers\.(\d+)\.1\.net\.1\.", r"stages.0.blocks.\1.ffn.fc1."),
    (r"^transformer\.layers\.(\d+)\.1\.net\.3\.", r"stages.0.blocks.\1.ffn.fc2."),
    (r"^linear_head\.0\.", "head.norm."),
    (r"^linear_head\.1\.", "head.fc."),
]
_rename = renamer(_RULES)
_FUSED = re.compile(r"^transformer\.layers\.(\d+)\.0\.(to_qkvp?|to_out)\.weight$")


def unshuffle(weight: torch.Tensor, groups: int) -> torch.Tensor:
    """The released interleaved GroupLinear's weight (rows in group blocks) in vspec's row order: row o
    = released row (o mod G) out/G + o // G."""
    o = torch.arange(weight.shape[0])
    return weight[(o % groups) * (weight.shape[0] // groups) + o // groups]


def _split_roles(state_dict: Mapping[str, torch.Tensor], fused: bool, groups: int) -> dict[str, torch.Tensor]:
    """The attention weights under vspec's names: `to_qkv(p)` chunked into the role matrices Q K V (P)
    and `to_out` as W, or (`fused`) the untied original's `qkv` / `proj`."""
    out = {}
    for key, value in state_dict.items():
        m = _FUSED.match(key)
        if m is None:
            out[key] = value
            continue
        attn = f"stages.0.blocks.{m.group(1)}.attn"
        if fused:
            out[f"{attn}.{'proj' if m.group(2) == 'to_out' else 'qkv'}.weight"] = value
        elif m.group(2) == "to_out":
            out[f"{attn}.projections.matrices.W.weight"] = value
        else:
            for letter, chunk in zip("QKVP", unshuffle(value, groups).chunk(len(m.group(2)) - 3)):
                out[f"{attn}.projections.matrices.{letter}.weight"] = chunk
    return out


def from_official_msf(state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> nn.Module:
    spec = spec_from_config(config)
    projections = spec.block.attention.projections
    groups = projections.groups if projections is not None else 1
    return load_mapped(build(spec), _split_roles(state_dict, projections is None, groups), _rename)
