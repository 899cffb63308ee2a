"""The Refiner authors' released models (Refined-ViT, models/refined_transformer.py:Refiner_ViT) -> vspec.

`config` holds the released constructor's arguments (`REFINER.arguments`, with the constructor's defaults
for those left out). Every one is honoured or refused by name; none is ignored:

- honoured: img_size, patch_size, in_chans, num_classes (0: no classifier, as released), embed_dim,
  depth (a list of booleans, True = a shared block; an int: that many compute blocks, for which the
  released constructor reads neither apply_transform nor head_expand), num_heads,
  mlp_ratio, qkv_bias, qk_scale (the attention scale, `qk_scale or head_dim ** -0.5`), norm_layer
  (LayerNorm, its eps), use_cnn_embed (the CNN stem, or a plain p x p convolution), apply_transform
  and head_expand (compute blocks refining their own maps), return_dense (the dense auxiliary head);
  training-only arguments map onto the spec's training fields: attn_drop_rate (`attn_drop`),
  drop_path_rate (`Model.drop_path`, ramped linearly from 0 as released), mix_token (`DenseAux.mix_token`:
  MixToken in the training forward) and cos_reg (`Model.attention_maps`: the training forward also returns
  every block's attention maps, for the cos_reg loss term).
- no effect in the released model, accepted: group and share_atten (stored, never read);
  interpolate_pos_embedding where the grid is 14 x 14 (it resizes the 14 x 14 table to the grid: the
  identity there; at any other grid the released forward fails, refused).
- refused: hybrid_backbone, a nonzero drop_rate (it also drops after the position embedding, which
  vspec has no place for), other norm layers, and what the released constructor cannot build.

Released-code facts it encodes: the CNN patch stem, blocks x + 2 f(LN(x / 2)), an MLP output scale,
shared blocks refining the incoming maps with DLA expansion 3 (`spec.released_attention`).
"""

from collections.abc import Mapping
from typing import Any

from ... import spec as specs
from ...convert.common import attention_scale, layer_norm_eps, qk_scale_refusal
from ...convert.released import Released
from . import spec as family_spec

__all__ = ["POS_GRID", "REFINER"]

POS_GRID = 14  # resize_pos_embed reshapes the table's patch rows to 14 x 14, whatever the model's grid


def _is_flags(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, bool) for v in value)


def _refusals(a: dict[str, Any]) -> list[tuple[bool, str]]:
    depth, transform, img, patch = a["depth"], a["apply_transform"], a["img_size"], a["patch_size"]
    listed = not isinstance(depth, int)
    square = isinstance(img, int) and not isinstance(img, bool)
    grid = img // patch if square and isinstance(patch, int) else None
    counts = (len(depth), len(transform)) if _is_flags(depth) and _is_flags(transform) else None
    return [
        (a["hybrid_backbone"] is not None, "hybrid_backbone: the CNN-backbone embedding (HybridEmbed) is not "
                                           "converted"),
        qk_scale_refusal(a),
        (listed and not _is_flags(depth), f"depth {depth!r}: an int, or a list of booleans (True = a shared block)"),
        (listed and transform is None, "apply_transform None with a listed depth: the released constructor reads "
                                       "apply_transform[i] for every block (give a list of booleans)"),
        (listed and transform is not None and not _is_flags(transform),
         f"apply_transform {transform!r}: a list of booleans, one per block"),
        (counts is not None and counts[0] != counts[1], f"depth has {counts and counts[0]} blocks, apply_transform "
                                                        f"{counts and counts[1]}"),
        (a["drop_rate"] != 0, f"drop_rate {a['drop_rate']}: the released model also drops after the position "
                              "embedding, which vspec has no place for"),
        (layer_norm_eps(a["norm_layer"]) is None, f"norm_layer {a['norm_layer']!r}: only LayerNorm (nn.LayerNorm or "
                                                  "partial(nn.LayerNorm, eps=...)) is converted"),
        (a["mix_token"] and not a["return_dense"], "mix_token without return_dense: the released constructor asserts "
                                                   "return_dense when mix_token is on"),
        (a["use_cnn_embed"] and not square, f"img_size {img!r}: the released CNN stem takes one int (square images)"),
        (a["interpolate_pos_embedding"] and grid != POS_GRID,
         f"interpolate_pos_embedding with a {grid} x {grid} grid: the released forward reshapes the position "
         f"table to {POS_GRID} x {POS_GRID} and runs only where that is the grid (then it is the identity)"),
    ]


def _spec(a: dict[str, Any], weights: Mapping | None = None) -> specs.Model:
    depth = a["depth"]
    if isinstance(depth, int):  # that many compute blocks; apply_transform and head_expand are not read
        pattern, transform = [False] * depth, None
    else:
        pattern, transform = list(depth), list(a["apply_transform"])
    blocks = family_spec.released_blocks(pattern, a["num_heads"], transform, a["head_expand"],
                                         qkv_bias=bool(a["qkv_bias"]), mlp_ratio=a["mlp_ratio"],
                                         scale=attention_scale(a["qk_scale"]), attn_drop=float(a["attn_drop_rate"]),
                                         norm_eps=layer_norm_eps(a["norm_layer"]))
    patch = a["patch_size"]
    embedder = specs.ConvStem(patch_size=patch) if a["use_cnn_embed"] else specs.PatchEmbed(patch_size=patch)
    head = specs.ClassTokenHead(dense=specs.DenseAux(mix_token=bool(a["mix_token"])) if a["return_dense"] else None)
    return specs.Model(embedder=embedder, block=blocks, head=head, dim=a["embed_dim"], num_classes=a["num_classes"],
                       img_size=a["img_size"], in_chans=a["in_chans"], drop_path=float(a["drop_path_rate"]),
                       attention_maps=bool(a["cos_reg"]))


REFINER = Released(
    name="Refiner",
    # the released constructor's arguments with its defaults (norm_layer: nn.LayerNorm, eps 1e-5)
    arguments={
        "img_size": 224, "patch_size": 16, "in_chans": 3, "num_classes": 1000, "embed_dim": 768, "depth": 12,
        "num_heads": 12, "mlp_ratio": 4.0, "qkv_bias": False, "qk_scale": None, "drop_rate": 0.0,
        "attn_drop_rate": 0.0, "drop_path_rate": 0.0, "hybrid_backbone": None, "norm_layer": "LayerNorm",
        "group": False, "share_atten": False, "cos_reg": False, "use_cnn_embed": True, "apply_transform": None,
        "interpolate_pos_embedding": False, "head_expand": 3, "mix_token": True, "return_dense": True,
    },
    to_spec=_spec,
    refusals=_refusals,
    rules=[
        (r"^patch_embed\.", "embedder."),
        (r"^blocks\.(\d+)\.attn\.DLA\.", r"stages.0.blocks.\1.attn.core.refine."),
        (r"^blocks\.(\d+)\.attn\.adapt_bn\.", r"stages.0.blocks.\1.attn.core.refine.adapt_bn."),
        (r"^blocks\.(\d+)\.mlp\.scale_channel$", r"stages.0.blocks.\1.ffn.ls.gamma"),
        (r"^blocks\.(\d+)\.mlp\.", r"stages.0.blocks.\1.ffn."),
        (r"^blocks\.(\d+)\.", r"stages.0.blocks.\1."),
        (r"^head\.", "head.fc."),
        (r"^aux_head\.", "head.aux."),
    ],
)
