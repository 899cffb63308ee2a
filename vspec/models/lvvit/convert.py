"""The LV-ViT authors' released models (zihangJiang/TokenLabeling, tlt/models/lvvit.py:LV_ViT) -> vspec.

`config` holds the released constructor's arguments (`LVVIT.arguments`, its defaults for those left out). Every one
is honoured or refused by name; none is ignored:

- honoured: img_size, patch_size, in_chans, num_classes, embed_dim, depth, num_heads, mlp_ratio, qkv_bias,
  qk_scale (`qk_scale or head_dim ** -0.5`), norm_layer (LayerNorm, its eps), p_emb ('4_2': the 64-wide CNN stem,
  '4_2_128': the 128-wide one, anything else: one patch_size x patch_size convolution), head_dim (None, or
  embed_dim / num_heads), skip_lam (the residual branches divided by it: `RescaledBlock`; 1 is the plain pre-norm
  block), order (None, or a list of 'tr' blocks, which overrides depth as released), return_dense (the dense
  auxiliary head: eval logits = class logits + 0.5 x the max over patch tokens of the aux logits); training-only
  attn_drop_rate (`attn_drop`), drop_path_rate with drop_path_decay 'linear' (`Model.drop_path`, ramped from 0 as
  released).
- mix_token: MixToken in the training forward (`DenseAux.mix_token`, vspec/nn/mix_token.py), as released.
- refused: hybrid_backbone, a nonzero drop_rate (it also drops after the position embedding, which vspec has no place
  for), drop_path_decay other than 'linear' with a nonzero rate, order entries 'mha' / 'ffn' (blocks no released
  factory builds: they also scale the norm's input), another head_dim, other norm layers, mix_token without
  return_dense (the released constructor asserts), an odd patch_size with the CNN stem, and an image side that the
  patch size does not divide.

Released-code facts it encodes (the fixtures' README, "LV-ViT"): the CNN stem (`vspec.spec.ConvStem`, growth 1),
class token and learned position table, pre-norm blocks x + f(LN(x)) / skip_lam without qkv bias, the final
LayerNorm, `head` on the class token and `aux_head` on every patch token.
"""

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ... import spec as specs
from ...convert.common import ISOTROPIC_BODY, layer_norm_eps, qk_scale_refusal, released_block
from ...convert.released import Released
from . import spec as family_spec

__all__ = ["LVVIT"]

_STEMS = {"4_2": 64, "4_2_128": 128}  # p_emb -> the CNN stem's width (PatchEmbed4_2, PatchEmbed4_2_128)


def _sides(img: Any) -> tuple:
    """The sides a released img_size gives: an int's one, a sequence's each."""
    return tuple(img) if isinstance(img, Sequence) and not isinstance(img, str) else (img,)


def _sides_ok(sides: tuple) -> bool:
    return len(sides) in (1, 2) and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sides)


def _refusals(a: dict[str, Any]) -> list[tuple[bool, str]]:
    order, patch, sides = a["order"], a["patch_size"], _sides(a["img_size"])
    cnn = a["p_emb"] in _STEMS
    listed = isinstance(order, Sequence) and not isinstance(order, str)
    head_dim = a["head_dim"]
    return [
        (a["hybrid_backbone"] is not None, "hybrid_backbone: the CNN-backbone embedding (HybridEmbed) is not "
                                           "converted"),
        qk_scale_refusal(a),
        (a["drop_rate"] != 0, f"drop_rate {a['drop_rate']}: the released model also drops after the position "
                              "embedding, which vspec has no place for"),
        (a["drop_path_rate"] != 0 and a["drop_path_decay"] != "linear",
         f"drop_path_decay {a['drop_path_decay']!r}: vspec ramps the drop-path rate linearly from 0 ('linear')"),
        (order is not None and not listed, f"order {order!r}: None or a list of block types"),
        (listed and any(b != "tr" for b in order), f"order {order!r}: only 'tr' blocks are converted ('mha' / "
                                                   "'ffn' blocks also scale the norm's input; no released factory "
                                                   "builds them)"),
        (head_dim is not None and head_dim != a["embed_dim"] // a["num_heads"],
         f"head_dim {head_dim!r}: only embed_dim / num_heads (None) is converted; no released factory sets another"),
        (layer_norm_eps(a["norm_layer"]) is None, f"norm_layer {a['norm_layer']!r}: only LayerNorm (nn.LayerNorm or "
                                                  "partial(nn.LayerNorm, eps=...)) is converted"),
        (a["mix_token"] and not a["return_dense"], "mix_token without return_dense: the released constructor asserts "
                                                   "return_dense when mix_token is on"),
        (not _sides_ok(sides), f"img_size {a['img_size']!r}: an int or a pair of ints"),
        (cnn and isinstance(patch, int) and patch % 2 == 1, f"patch_size {patch}: the CNN stem (p_emb "
                                                            f"{a['p_emb']!r}) strides 2, then patch_size / 2"),
        (_sides_ok(sides) and isinstance(patch, int) and patch > 0 and any(s % patch for s in sides),
         f"img_size {a['img_size']!r}: the patch_size {patch} must divide each side"),
    ]


def _spec(a: dict[str, Any], weights: Mapping | None = None) -> specs.Model:
    patch, lam = a["patch_size"], float(a["skip_lam"])
    width = _STEMS.get(a["p_emb"])
    embedder = specs.PatchEmbed(patch_size=patch) if width is None else specs.ConvStem(patch_size=patch, width=width,
                                                                                       growth=1)
    block = released_block(a, block=specs.Block if lam == 1 else functools.partial(family_spec.RescaledBlock,
                                                                                   skip_lam=lam),
                           attn_drop=float(a["attn_drop_rate"]))
    depth = a["depth"] if a["order"] is None else len(a["order"])  # order overrides depth
    head = specs.ClassTokenHead(dense=specs.DenseAux(mix_token=bool(a["mix_token"])) if a["return_dense"] else None)
    return specs.Model(embedder=embedder, block=block, depth=depth, head=head, dim=a["embed_dim"],
                       num_classes=a["num_classes"], img_size=a["img_size"], in_chans=a["in_chans"],
                       drop_path=float(a["drop_path_rate"]))


def _notes(a: dict[str, Any], spec: specs.Model, weights: Mapping) -> list[str]:
    """What the released model does differently, and vspec does not implement."""
    return [note for on, note in (
        (a["return_dense"] and a["num_classes"] == 0,
         "num_classes 0 with return_dense: the released eval output adds 0.5 x the max of the patch tokens to the "
         "class token; vspec's headless model returns the class token"),
    ) if on]


LVVIT = Released(
    name="LV-ViT",
    # the released constructor's arguments with its defaults (norm_layer: nn.LayerNorm, eps 1e-5)
    arguments={
        "img_size": 224, "patch_size": 16, "in_chans": 3, "num_classes": 1000, "embed_dim": 768, "depth": 12,
        "num_heads": 12, "mlp_ratio": 4.0, "qkv_bias": False, "qk_scale": None, "drop_rate": 0.0,
        "attn_drop_rate": 0.0, "drop_path_rate": 0.0, "drop_path_decay": "linear", "hybrid_backbone": None,
        "norm_layer": "LayerNorm", "p_emb": "4_2", "head_dim": None, "skip_lam": 1.0, "order": None,
        "mix_token": False, "return_dense": False,
    },
    to_spec=_spec,
    refusals=_refusals,
    notes=_notes,
    rules=[
        (r"^patch_embed\.", "embedder."),
        (r"^aux_head\.", "head.aux."),
        *ISOTROPIC_BODY,
    ],
)
