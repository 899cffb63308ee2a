"""The T2T-ViT authors' released models (yitu-opensource/T2T-ViT, models/t2t_vit.py:T2T_ViT) -> vspec.

`config` holds the released constructor's arguments (`T2T.arguments`, its defaults for those left out). Every one is
honoured or refused by name; none is ignored:

- honoured: img_size (a multiple of 16; a pair of equal sides too), tokens_type performer | transformer (the T2T
  module's token blocks), in_chans, num_classes, embed_dim, depth, num_heads, mlp_ratio, qkv_bias, qk_scale (None:
  head_dim^-0.5; the released factories pass embed_dim^-0.5 only with pretrained=True: pass it to match such
  weights), norm_layer (LayerNorm and its eps), token_dim; training-only drop_rate (the classifier's input dropout
  `head.drop` and the blocks' output dropouts; the released one also drops after the position table, which vspec
  has no place for: refused above 0), attn_drop_rate (`attn_drop`), drop_path_rate (`Model.drop_path`, ramped from
  0 as released).
- refused: tokens_type convolution (the soft splits as convolutions, another module), other norm layers.

Released-code facts it encodes: the T2T module (`vspec.spec.T2TEmbed`: unfold 7/4/2 and 3/2/1 twice, one-head
token blocks, the performer's fixed random features `w` loaded from the checkpoint, LayerNorm eps 1e-5), class
token, the fixed 1-D sinusoid table (stored as a frozen parameter: checked, then recomputed), pre-norm blocks.
"""

from collections.abc import Mapping
from typing import Any

from ... import spec as specs
from ...convert.common import ISOTROPIC_BODY, check_sinusoid, layer_norm_eps, qk_scale_refusal, released_block, side
from ...convert.released import Released
from . import spec as family_spec

__all__ = ["T2T", "TOKENS_TYPES"]

TOKENS_TYPES = ("performer", "transformer")


def _refusals(a: dict[str, Any]) -> list[tuple[bool, str]]:
    img = side(a["img_size"])
    return [
        qk_scale_refusal(a),
        (a["tokens_type"] not in TOKENS_TYPES, f"tokens_type {a['tokens_type']!r}: vspec builds performer and "
                                               "transformer (the convolution form is another module)"),
        (layer_norm_eps(a["norm_layer"]) is None, f"norm_layer {a['norm_layer']!r}: only torch's LayerNorm (any eps)"),
        (img is None or img % 16 or img < 16,
         f"img_size {a['img_size']!r}: the released model takes a square side that is a multiple of 16"),
        (a["drop_rate"] != 0, f"drop_rate {a['drop_rate']}: the released model also drops after the position table, "
                              "which vspec has no place for (set the spec's dropouts instead)"),
    ]


def _spec(a: dict[str, Any], weights: Mapping | None = None) -> specs.Model:
    dim = a["embed_dim"]
    block = released_block(a, attn_drop=float(a["attn_drop_rate"]))
    return specs.Model(embedder=family_spec.T2TEmbed(token_dim=a["token_dim"], block=a["tokens_type"]), block=block,
                       depth=a["depth"], dim=dim, num_classes=a["num_classes"], img_size=side(a["img_size"]),
                       in_chans=a["in_chans"], pos_embed="sincos1d", drop_path=float(a["drop_path_rate"]))


def _token_block(suffix: str):
    """The T2T module's block i (attention1, 2) -> the embedder's block i - 1, then `suffix`."""
    return lambda m: f"embedder.blocks.{int(m[1]) - 1}.{suffix.format(*m.groups()[1:])}"


T2T = Released(
    name="T2T",
    arguments={
        "img_size": 224, "tokens_type": "performer", "in_chans": 3, "num_classes": 1000, "embed_dim": 768,
        "depth": 12, "num_heads": 12, "mlp_ratio": 4.0, "qkv_bias": False, "qk_scale": None, "drop_rate": 0.0,
        "attn_drop_rate": 0.0, "drop_path_rate": 0.0, "norm_layer": "LayerNorm", "token_dim": 64,
    },
    to_spec=_spec,
    refusals=_refusals,
    checks=(check_sinusoid,),
    rules=[
        (r"^pos_embed$", None),  # the fixed table, checked and recomputed
        (r"^tokens_to_token\.attention(\d)\.attn\.(qkv|proj)\.", _token_block("{}.")),
        (r"^tokens_to_token\.attention(\d)\.mlp\.0\.", _token_block("mlp.fc1.")),
        (r"^tokens_to_token\.attention(\d)\.mlp\.2\.", _token_block("mlp.fc2.")),
        (r"^tokens_to_token\.attention(\d)\.", _token_block("")),
        (r"^tokens_to_token\.project\.", "embedder.project."),
        *ISOTROPIC_BODY,
    ],
)
