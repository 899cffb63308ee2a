"""The iRPE authors' released DeiT (microsoft/Cream iRPE/DeiT-with-iRPE, rpe_vision_transformer.py:VisionTransformer,
timm 0.3.2's ViT with RPEAttention) -> vspec.

`config` holds the released constructor's arguments (`IRPE.arguments`, its defaults for those left out), with
`rpe_config` the dict of `get_rpe_config(...)` (keys rpe_q, rpe_k, rpe_v, each None or a single config).
Every argument is honoured or refused by name; none is ignored:

- honoured: img_size, patch_size, in_chans, num_classes, embed_dim, depth, num_heads, mlp_ratio, qkv_bias,
  qk_scale (`scale`), norm_layer (LayerNorm, its eps; the constructor's default nn.LayerNorm is eps 1e-5),
  attn_drop_rate, drop_path_rate (ramped from 0 as released), rpe_config: which of q, k, v carry a table
  (`on`), shared_head, alpha / beta / gamma (the piecewise index).
- refused: a non-square img_size (the released attention takes its grid as int(sqrt(N)) square), drop_rate
  > 0 (it also drops after the position embedding, which vspec has no place for), hybrid_backbone (a CNN stem
  vspec does not convert), rpe_config None or with every place None (no iRPE: the plain DeiT converts with
  from_timm), a mode other than contextual (the bias mode is not implemented), a method other than product
  (3), num_buckets other than the product method's count plus the class token's, places whose configs differ.
- informational keys of the fixtures, accepted and checked: `rpe_config_args` (the get_rpe_config call; its
  `skip` must be 1: the class token), `rpe_method_ids` (the METHOD ids; PRODUCT must be 3).

Released facts it encodes: the class token takes its own bucket (skip = N - int(sqrt(N))^2 = 1), the grid
is int(sqrt(N)) square (vspec reads it from the layout), tables are (1 or H, head_dim, buckets) on q and k
and (1 or H, buckets, head_dim) on v, `proj` always has a bias.
"""

from collections.abc import Mapping
from typing import Any

from ... import spec as specs
from ...convert.common import ISOTROPIC_BODY, ConversionError, layer_norm_eps, qk_scale_refusal, refuse, released_block
from ...convert.released import Released
from . import spec as family_spec

__all__ = ["IRPE", "PRODUCT", "SINGLE"]

SINGLE = ("shared_head", "mode", "method", "alpha", "beta", "gamma", "num_buckets")
PRODUCT = 3  # irpe.METHOD.PRODUCT


def _places(rpe_config: Any) -> tuple[str, dict[str, Any]]:
    """The places that carry iRPE ("qkv" letters) and their one shared single config."""
    if not isinstance(rpe_config, Mapping) or set(rpe_config) != {"rpe_q", "rpe_k", "rpe_v"}:
        raise ConversionError(f"iRPE config: rpe_config {rpe_config!r}: a dict with rpe_q, rpe_k, rpe_v (no iRPE at "
                              "all is the plain DeiT: convert it with from_timm)")
    singles = {p: rpe_config[f"rpe_{p}"] for p in "qkv" if rpe_config[f"rpe_{p}"] is not None}
    if not singles:
        raise ConversionError("iRPE config: rpe_config has no place (rpe_q, rpe_k, rpe_v all None): the plain "
                              "DeiT converts with from_timm")
    for p, one in singles.items():
        if not isinstance(one, Mapping) or set(one) != set(SINGLE):
            raise ConversionError(f"iRPE config: rpe_config.rpe_{p} {one!r}: a single config with {', '.join(SINGLE)}")
    first = next(iter(singles.values()))
    refuse("iRPE", [(any(dict(one) != dict(first) for one in singles.values()),
                     "rpe_config: the places' configs differ (vspec's IRPEAttention shares one index function)")])
    return "".join(singles), dict(first)


def _refusals(a: dict[str, Any]) -> list[tuple[bool, str]]:
    _, one = _places(a["rpe_config"])
    args, img = a["rpe_config_args"] or {}, a["img_size"]
    buckets = (2 * int(float(one["beta"])) + 1) ** 2 + 1  # the class token's
    return [
        qk_scale_refusal(a),
        (not isinstance(img, int) and not (isinstance(img, (list, tuple)) and len(img) == 2 and img[0] == img[1]),
         f"img_size {img!r}: the released attention takes its grid as int(sqrt(N)) square (an int, or an equal "
         "pair)"),
        (a["drop_rate"] != 0, f"drop_rate {a['drop_rate']!r}: it also drops after the position embedding, which "
                              "vspec has no place for (0 only)"),
        (a["hybrid_backbone"] is not None, f"hybrid_backbone {a['hybrid_backbone']!r}: the CNN stem is not converted"),
        (layer_norm_eps(a["norm_layer"]) is None,
         f"norm_layer {a['norm_layer']!r}: only LayerNorm (nn.LayerNorm or partial(nn.LayerNorm, eps=))"),
        (one["mode"] != "contextual", f"rpe_config mode {one['mode']!r}: only 'contextual' (the bias mode is not "
                                      "implemented)"),
        (one["method"] != PRODUCT, f"rpe_config method {one['method']!r}: only the product method ({PRODUCT})"),
        (one["num_buckets"] != buckets, f"rpe_config num_buckets {one['num_buckets']!r}: the product method with the "
                                        f"class token's bucket has {buckets} (skip 1)"),
        (a["rpe_method_ids"] is not None and (not isinstance(a["rpe_method_ids"], Mapping)
                                               or a["rpe_method_ids"].get("PRODUCT") != PRODUCT),
         f"rpe_method_ids {a['rpe_method_ids']!r}: PRODUCT must be {PRODUCT}, the release's id that method reads"),
        (not isinstance(args, Mapping) or args.get("skip", 1) != 1,
         f"rpe_config_args {args!r}: skip must be 1 (the class token before the grid)"),
    ]


def _spec(a: dict[str, Any], weights: Mapping | None = None) -> specs.Model:
    on, one = _places(a["rpe_config"])
    dim = a["embed_dim"]
    block = released_block(a, attention=family_spec.IRPEAttention, attn_drop=float(a["attn_drop_rate"]), on=on,
                           alpha=float(one["alpha"]), beta=float(one["beta"]), gamma=float(one["gamma"]),
                           shared_head=bool(one["shared_head"]))
    return specs.Model(
        embedder=specs.PatchEmbed(patch_size=a["patch_size"]),
        block=block,
        depth=a["depth"], dim=dim, num_classes=a["num_classes"], img_size=a["img_size"], in_chans=a["in_chans"],
        drop_path=float(a["drop_path_rate"]),
    )


IRPE = Released(
    name="iRPE",
    arguments={
        "img_size": 224, "patch_size": 16, "in_chans": 3, "num_classes": 1000, "embed_dim": 768, "depth": 12,
        "num_heads": 12, "mlp_ratio": 4.0, "qkv_bias": False, "qk_scale": None, "drop_rate": 0.0,
        "attn_drop_rate": 0.0, "drop_path_rate": 0.0, "hybrid_backbone": None, "norm_layer": "LayerNorm",
        "rpe_config": None,
        "rpe_config_args": None, "rpe_method_ids": None,  # the fixtures' records of the config's making
    },
    to_spec=_spec,
    refusals=_refusals,
    rules=[
        (r"^patch_embed\.", "embedder."),
        (r"^blocks\.(\d+)\.attn\.rpe_([qkv])\.lookup_table_weight$", r"stages.0.blocks.\1.attn.core.table_\2"),
        *ISOTROPIC_BODY,
    ],
)
