"""The DHVT authors' released models (DHVT repository, vision_transformer.py:VisionTransformer with
apply_dhvt=True) -> vspec.

`config` holds the released constructor's arguments (`DHVT.arguments`, with the constructor's defaults for
those left out). Every one is honoured or refused by name; none is ignored:

- honoured: img_size, patch_size (2, 4 or 16: the SOPE the released code builds), num_classes (0: no
  classifier, as released), embed_dim, depth, num_heads, mlp_ratio, qkv_bias, norm_layer (LayerNorm,
  its eps; None is eps 1e-6 as released), act_layer (None or GELU: DAFF's activation); training-only
  arguments map onto the spec's training fields: drop_rate (with apply_dhvt it reaches only the
  attention's output dropout: `proj_drop`), attn_drop_rate (`attn_drop`), drop_path_rate
  (`Model.drop_path`, ramped linearly from 0 as released).
- no effect in the released model, accepted: embed_layer (not read with apply_dhvt), weight_init (the
  initialisation, replaced by the loaded weights; one of the four the constructor asserts).
- refused: apply_dhvt False and distilled True (the released constructor fails on both), in_chans
  other than 3 (the released SOPE reads 3 channels whatever it says), representation_size (a pre-logits
  layer vspec has no place for), other activations and norm layers.

Released-code facts it encodes: SOPE (no conv bias, BatchNorm), DAFF (conv bias, SE reduction 4),
head tokens in every block (their LayerNorm eps 1e-5 whatever norm_layer says), no position embedding,
class-token head.
"""

from collections.abc import Mapping
from typing import Any

from ... import spec as specs
from ...convert.common import ISOTROPIC_BODY, is_gelu, layer_norm_eps, released_block
from ...convert.released import Released
from . import spec as family_spec

__all__ = ["DHVT", "PATCH_SIZES", "WEIGHT_INITS"]

PATCH_SIZES = (2, 4, 16)  # ConvPatchEmbed's branches
WEIGHT_INITS = ("", "jax", "jax_nlhb", "nlhb")  # init_weights asserts one of these


def _image(img: Any) -> int | None:
    """The side of a square image (an int, or an equal pair), else None: DAFF lays the tokens on a
    square grid."""
    if isinstance(img, (list, tuple)) and len(img) == 2 and img[0] == img[1]:
        img = img[0]
    return img if isinstance(img, int) and not isinstance(img, bool) else None


def _eps(norm: Any) -> float | None:
    return 1e-6 if norm is None else layer_norm_eps(norm)


def _refusals(a: dict[str, Any]) -> list[tuple[bool, str]]:
    return [
        (not a["apply_dhvt"], "apply_dhvt False: the released constructor cannot build it (it reads num_patches "
                              "before assigning it); the plain DeiT it means converts with from_timm"),
        (bool(a["distilled"]), "distilled True: the released constructor cannot build it (the distillation token's "
                               "width is read from an undefined embed_dims)"),
        (a["patch_size"] not in PATCH_SIZES, f"patch_size {a['patch_size']!r}: the released SOPE builds for patch 2, "
                                             "4 and 16 only"),
        (a["in_chans"] != 3, f"in_chans {a['in_chans']!r}: the released SOPE reads 3 channels whatever in_chans says"),
        (bool(a["representation_size"]), f"representation_size {a['representation_size']!r}: the pre-logits layer "
                                         "(Linear + Tanh) is not converted"),
        (_image(a["img_size"]) is None, f"img_size {a['img_size']!r}: DAFF lays the tokens on a square grid "
                                        "(an int, or an equal pair)"),
        (_eps(a["norm_layer"]) is None, f"norm_layer {a['norm_layer']!r}: only LayerNorm (None, nn.LayerNorm or "
                                        "partial(nn.LayerNorm, eps=...)) is converted"),
        (a["act_layer"] is not None and not is_gelu(a["act_layer"]),
         f"act_layer {a['act_layer']!r}: only GELU (vspec's DAFF has no other activation)"),
        (a["weight_init"] not in WEIGHT_INITS, f"weight_init {a['weight_init']!r}: the released constructor asserts "
                                               f"one of {', '.join(map(repr, WEIGHT_INITS))}"),
    ]


def _spec(a: dict[str, Any], weights: Mapping | None = None) -> specs.Model:
    dim = a["embed_dim"]
    return specs.Model(
        embedder=family_spec.SOPE(patch_size=a["patch_size"]),
        block=released_block(a, block=family_spec.HeadTokenBlock,
                             ffn=family_spec.DAFF(hidden=int(dim * a["mlp_ratio"])),
                             norm=specs.Norm(eps=_eps(a["norm_layer"])), attn_drop=float(a["attn_drop_rate"]),
                             proj_drop=float(a["drop_rate"])),
        depth=a["depth"], dim=dim, num_classes=a["num_classes"], img_size=_image(a["img_size"]), pos_embed="none",
        drop_path=float(a["drop_path_rate"]),
    )


DHVT = Released(
    name="DHVT",
    # the released constructor's arguments with its defaults (embed_layer: the class PatchEmbed)
    arguments={
        "img_size": 32, "patch_size": 16, "in_chans": 3, "num_classes": 100, "embed_dim": 768, "depth": 12,
        "num_heads": 12, "mlp_ratio": 4.0, "qkv_bias": True, "representation_size": None, "distilled": False,
        "drop_rate": 0.0, "attn_drop_rate": 0.0, "drop_path_rate": 0.0, "embed_layer": "PatchEmbed",
        "norm_layer": None, "act_layer": None, "weight_init": "", "apply_dhvt": True,
    },
    to_spec=_spec,
    refusals=_refusals,
    rules=[
        (r"^patch_embed\.", "embedder."),
        (r"^blocks\.(\d+)\.attn\.pos_embed$", r"stages.0.blocks.\1.head_tokens.embed"),
        (r"^blocks\.(\d+)\.attn\.ht_proj\.", r"stages.0.blocks.\1.head_tokens.proj."),
        (r"^blocks\.(\d+)\.attn\.ht_norm\.", r"stages.0.blocks.\1.head_tokens.norm."),
        *ISOTROPIC_BODY,
    ],
)
