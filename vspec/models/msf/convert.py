"""The MSF authors' released models (MSFtransformer, vit_pytorch/simple_vit_flexatt.py:SimpleViTflexAtt)
-> vspec.

`config` holds the released constructor's arguments (`MSF.arguments`; image_size, patch_size, num_classes,
dim, depth, heads and mlp_dim have no default there). Every one is honoured or refused by name; none is
ignored: image_size (an int or a (height, width) pair), patch_size (an int or an equal pair), num_classes
(at least 1: the released head is a Linear), dim, depth, heads, mlp_dim, channels (`Model.in_chans`),
dim_head (default 64) and att: `orig` or `msf`, optionally with `-gN` (N-group interleaved projections,
the only grouping that code reaches); the constructor's default `origAtt` builds no attention (refused).

Released-code facts it encodes: SimpleViT (patchify -> LayerNorm -> Linear -> LayerNorm,
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

from ... import spec as specs
from ...convert.common import REQUIRED, side
from ...convert.released import Released
from . import spec as family_spec

__all__ = ["MSF", "unshuffle"]

_DEFAULT_ATT = "origAtt"  # the constructor's default, for which get_attention_module returns no module
_ATT = re.compile(r"(orig|msf)(?:-g(\d+))?")


def _att(att: Any) -> re.Match | None:
    return _ATT.fullmatch(att) if isinstance(att, str) else None


def _attention(att: str, heads: int, head_dim: int) -> specs.MHSA | family_spec.MeanShiftAttention:
    m = _att(att)
    groups = int(m.group(2) or 1)
    common = dict(heads=heads, head_dim=head_dim, qkv_bias=False, proj_bias=False)
    if m.group(1) == "msf":
        return family_spec.MeanShiftAttention(**common, projections=specs.Projections(groups=groups))
    return specs.MHSA(**common, projections=specs.Projections(groups=groups) if groups > 1 else None)


def _image(value: Any) -> tuple[int, int] | None:
    """An int, or a (height, width) pair of ints (the released `pair`)."""
    pair = tuple(value) if isinstance(value, (list, tuple)) else (value, value)
    ok = len(pair) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
    return pair if ok else None


def _refusals(a: dict[str, Any]) -> list[tuple[bool, str]]:
    return [
        (_image(a["image_size"]) is None, f"image_size {a['image_size']!r}: an int or a (height, width) pair"),
        (side(a["patch_size"]) is None, f"patch_size {a['patch_size']!r}: an int or an equal pair (vspec's patches "
                                         "are square)"),
        (a["num_classes"] == 0, "num_classes 0: the released head is a Linear with no outputs (vspec's 0 means no "
                                "classifier)"),
        (_att(a["att"]) is None, f"att must be 'orig' or 'msf', optionally with '-gN'; got {a['att']!r}"
                                 + (" (the constructor's default, for which get_attention_module returns no module)"
                                    if a["att"] == _DEFAULT_ATT else "")),
    ]


def _spec(a: dict[str, Any], weights: Mapping | None = None) -> specs.Model:
    ln = specs.Norm(eps=1e-5)
    attention = _attention(a["att"], a["heads"], a["dim_head"])
    return specs.Model(
        embedder=specs.SimplePatchEmbed(patch_size=side(a["patch_size"]), norm=ln),
        block=specs.Block(attention=attention, ffn=specs.MLP(hidden=a["mlp_dim"]), norm=ln),
        depth=a["depth"], dim=a["dim"], num_classes=a["num_classes"], img_size=_image(a["image_size"]),
        in_chans=a["channels"], class_token=False, pos_embed="sincos2d", final_norm=False, head=specs.GAPHead(norm=ln),
    )


_FUSED = re.compile(r"^transformer\.layers\.(\d+)\.0\.(to_qkvp?|to_out)\.weight$")


def unshuffle(weight: torch.Tensor, groups: int) -> torch.Tensor:
    """The released interleaved GroupLinear's weight (rows in group blocks) in vspec's row order: row o
    = released row (o mod G) out/G + o // G.

    Args:
        weight: the released weight (out, in).
        groups: G, the number of groups.
    """
    o = torch.arange(weight.shape[0])
    return weight[(o % groups) * (weight.shape[0] // groups) + o // groups]


def _split_roles(state_dict: Mapping[str, torch.Tensor], spec: specs.Model) -> dict[str, torch.Tensor]:
    """The attention weights under vspec's names: `to_qkv(p)` chunked into the role matrices Q K V (P)
    and `to_out` as W, or (the untied, ungrouped original) timm's fused `qkv` / `proj`."""
    projections = spec.block.attention.projections
    groups = projections.groups if projections is not None else 1
    out = {}
    for key, value in state_dict.items():
        m = _FUSED.match(key)
        if m is None:
            out[key] = value
            continue
        attn = f"stages.0.blocks.{m.group(1)}.attn"
        if projections is None:
            out[f"{attn}.{'proj' if m.group(2) == 'to_out' else 'qkv'}.weight"] = value
        elif m.group(2) == "to_out":
            out[f"{attn}.projections.matrices.W.weight"] = value
        else:
            for letter, chunk in zip("QKVP", unshuffle(value, groups).chunk(len(m.group(2)) - 3)):
                out[f"{attn}.projections.matrices.{letter}.weight"] = chunk
    return out


MSF = Released(
    name="MSF",
    # the released constructor's arguments (keyword-only) with its defaults
    arguments={
        "image_size": REQUIRED, "patch_size": REQUIRED, "num_classes": REQUIRED, "dim": REQUIRED, "depth": REQUIRED,
        "heads": REQUIRED, "mlp_dim": REQUIRED, "channels": 3, "dim_head": 64, "att": _DEFAULT_ATT,
    },
    to_spec=_spec,
    refusals=_refusals,
    prepare=_split_roles,
    rules=[
        (r"^to_patch_embedding\.1\.", "embedder.norm_in."),
        (r"^to_patch_embedding\.2\.", "embedder.proj."),
        (r"^to_patch_embedding\.3\.", "embedder.norm_out."),
        (r"^transformer\.layers\.(\d+)\.0\.norm\.", r"stages.0.blocks.\1.norm1."),
        (r"^transformer\.layers\.(\d+)\.1\.net\.0\.", r"stages.0.blocks.\1.norm2."),
        (r"^transformer\.layers\.(\d+)\.1\.net\.1\.", r"stages.0.blocks.\1.ffn.fc1."),
        (r"^transformer\.layers\.(\d+)\.1\.net\.3\.", r"stages.0.blocks.\1.ffn.fc2."),
        (r"^linear_head\.0\.", "head.norm."),
        (r"^linear_head\.1\.", "head.fc."),
    ],
)
