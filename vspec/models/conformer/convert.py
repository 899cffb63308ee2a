"""Conformer's released models (pengzhiliang/Conformer, conformer.py:Conformer) -> vspec.

`config` holds the released constructor's arguments (`CONFORMER.arguments`, with the constructor's defaults for
those left out) and `img_size` (the input size: the released model takes any, vspec's spec fixes one). Every one is
honoured or refused by name; none is ignored:

- honoured: patch_size (a multiple of 16: the couplings pool the map by patch / 4, / 8, / 16), in_chans,
  num_classes, channel_ratio (the CNN widths 64 / 128 / 256 x channel_ratio), num_med_block (bottlenecks after
  each transformer block, `ConvBranch.med_blocks`), embed_dim, depth (a multiple of 3, as the constructor
  asserts: 1 plain block, then depth / 3 - 1, depth / 3 and depth / 3 coupled blocks), num_heads, mlp_ratio,
  qkv_bias, qk_scale (the attention's `scale`), drop_rate (the MLP's and the attention output's dropout),
  attn_drop_rate, drop_path_rate (`Model.drop_path`, ramped linearly from 0 over all blocks, as released);
- refused: base_channel other than 64 (conv_cls_head is hard-wired to 256 x channel_ratio inputs, so any other
  base cannot run), num_classes 0 (trans_cls_head becomes an identity while conv_cls_head keeps a Linear with no
  outputs: the two logits cannot be summed).

Released-code facts it encodes: no position embedding; FCUDown's class token added to itself; BatchNorm eps 1e-5
in the stem, 1e-6 in the branch; LayerNorm eps 1e-6 but the final trans_norm 1e-5 (the head's norm).
"""

from collections.abc import Mapping
from typing import Any

from ... import spec as specs
from ...convert.common import Rule, qk_scale_refusal, released_block
from ...convert.released import Released
from . import spec as family_spec

__all__ = ["CONFORMER"]


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _refusals(a: dict[str, Any]) -> list[tuple[bool, str]]:
    p, depth = a["patch_size"], a["depth"]
    return [
        qk_scale_refusal(a),
        (a["base_channel"] != 64, f"base_channel {a['base_channel']!r}: conv_cls_head is hard-wired to 256 x "
                                  "channel_ratio inputs, which only base_channel 64 produces"),
        (not _int(depth) or depth < 3 or depth % 3, f"depth {depth!r}: the constructor asserts a multiple of 3"),
        (not _int(p) or p < 16 or p % 16, f"patch_size {p!r}: the couplings pool by patch / 4, / 8 and / 16, so a "
                                          "multiple of 16"),
        (a["num_classes"] == 0, "num_classes 0: trans_cls_head becomes an identity while conv_cls_head keeps a Linear "
                                "with no outputs, so the two cannot be summed"),
        (not _int(a["img_size"]), f"img_size {a['img_size']!r}: one int, the side of the square input"),
    ]


def _spec(a: dict[str, Any], weights: Mapping | None = None) -> specs.Model:
    p, depth = a["patch_size"], a["depth"]
    ratio, n, drop = a["channel_ratio"], depth // 3, float(a["drop_rate"])
    block = released_block(a, ffn=specs.MLP(ratio=float(a["mlp_ratio"]), drop=drop),
                           attn_drop=float(a["attn_drop_rate"]), proj_drop=drop)
    stages = []
    for s in range(3):  # stage s: width 64 x 2^s x channel_ratio, coupled at patch / 4 / 2^s
        width, down, blocks = int(64 * ratio * 2**s), p // 4 // 2**s, []
        for j in range(n):
            last = s == 2 and j == n - 1
            if s == 0 and j == 0:
                blocks.append(block)  # trans_1: beside the stem's bottleneck, no coupling
                continue
            branch = family_spec.ConvBranch(width=width, stride=2 if s and not j else 1, down=down,
                                            fusion_stride=2 if last else 1, med_blocks=a["num_med_block"])
            blocks.append(family_spec.CoupledBlock(attention=block.attention, ffn=block.ffn, conv=branch))
        stages.append(specs.Stage(depth=n, dim=a["embed_dim"], block=blocks))
    return specs.Model(embedder=family_spec.ConformerStem(patch_size=p, width=int(64 * ratio)), stages=stages,
                       num_classes=a["num_classes"], img_size=a["img_size"], in_chans=a["in_chans"], pos_embed="none",
                       final_norm=False, head=family_spec.ConformerHead(), drop_path=float(a["drop_path_rate"]))


def _rules(spec: specs.Model) -> list[Rule]:
    depth = spec.depth
    n, rules = depth // 3, []
    for i in range(2, depth + 1):  # conv_trans_i is block i - 1 of the body
        s, j = divmod(i - 1, n)
        rules += [(rf"^conv_trans_{i}\.trans_block\.mlp\.", f"stages.{s}.blocks.{j}.ffn."),
                  (rf"^conv_trans_{i}\.trans_block\.", f"stages.{s}.blocks.{j}."),
                  (rf"^conv_trans_{i}\.", f"stages.{s}.blocks.{j}.conv.")]
    return rules + [
        (r"^(conv1|bn1|conv_1)\.", r"embedder.\1."),
        (r"^trans_patch_conv\.", "embedder.patch_conv."),
        (r"^trans_1\.mlp\.", "stages.0.blocks.0.ffn."),
        (r"^trans_1\.", "stages.0.blocks.0."),
        (r"^trans_norm\.", "head.norm."),
        (r"^trans_cls_head\.", "head.tokens.fc."),
        (r"^conv_cls_head\.", "head.fc."),
    ]


CONFORMER = Released(
    name="Conformer",
    arguments={
        "patch_size": 16, "in_chans": 3, "num_classes": 1000, "base_channel": 64, "channel_ratio": 4,
        "num_med_block": 0, "embed_dim": 768, "depth": 12, "num_heads": 12, "mlp_ratio": 4.0, "qkv_bias": False,
        "qk_scale": None, "drop_rate": 0.0, "attn_drop_rate": 0.0, "drop_path_rate": 0.0, "img_size": 224,
    },
    to_spec=_spec,
    refusals=_refusals,
    rules=_rules,
)
