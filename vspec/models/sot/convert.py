"""The SoT authors' released models (SoT repository, class `SoT`) -> vspec.

`config` holds the released constructor's arguments, flat as the fixtures store them (`SOT.arguments`), and
may hold the constructor's own config dicts under `cfg_snapshot` (visualTokenConfig, ViTConfig,
representationConfig; `SOT.aliases` says which argument each field is). Where both give an argument they
must agree. Every argument is honoured or rejected by name; none is ignored.

Released-code facts it encodes: qkv without bias unless asked, attention scale `qk_scale or
head_dim ** -0.5`, torch's LayerNorm (eps 1e-5 unless `norm_layer` gives another; the flat argument
stands for both the constructor's own norm_layer, the final norm, and ViTConfig's, the blocks'), a
fixed 1-D sinusoid position embedding over class token and patches, MGCrP with m = n = wr_dim and
scalar centering, approximate svPN from a learnable start vector (eps 1e-5). The token grid is
hard-coded (14 x 14, or 56 x 56 with large_output) and the convolutional embeddings take their last
stride as img_size // 112: they build at 112 and 224 px only. The dense layers' layout (BatchNorm, or
none under timm 0.3.4) is read from the weights.
"""

import re
from collections.abc import Mapping
from typing import Any

from ... import spec as specs
from ...convert.common import (
    REQUIRED,
    ConversionError,
    Rule,
    check_sinusoid,
    is_gelu,
    layer_norm_eps,
    qk_scale_refusal,
    released_block,
)
from ...convert.released import Released
from . import spec as family_spec

__all__ = ["BLOCKS", "FUSIONS", "SOT", "TOKEN_TYPES"]

BLOCKS = {"DenseNet": "dense", "ResNet": "resnet", "Inception": "inception"}
TOKEN_TYPES = (*BLOCKS, "Naive_linear", "Non-local")
FUSIONS = {"sum_fc": "sum", "concat": "concat", "aggre_all": "aggr_all", "sum_loss": "late"}


def _dropout(value: Any) -> float:
    """The snapshot's `regular`: None, or nn.Dropout written out as "Dropout(p=0.5, ...)"."""
    if value is None:
        return 0.0
    match = re.fullmatch(r"Dropout\(p=([\d.]+).*\)", str(value))
    if match is None:
        raise ConversionError(f"SoT config: normalization regular {value!r} is not a dropout vspec can read")
    return float(match[1])


def _refusals(a: dict[str, Any]) -> list[tuple[bool, str]]:
    """What vspec does not convert, or the released code cannot build."""
    token, img, large = a["token_type"], a["img_size"], a["large_output"]
    rules = [
        qk_scale_refusal(a),
        (token not in TOKEN_TYPES, f"token_type {token!r}; known: {', '.join(TOKEN_TYPES)}"),
        (token == "Non-local", "token_type 'Non-local': the released non-local embedding (two strided convs, each "
                               "with a non-local block) is not vspec's nonlocal construction and is not converted"),
        (a["fusion_type"] not in FUSIONS, f"fusion_type {a['fusion_type']!r}; known: {', '.join(FUSIONS)}"),
        (a["representation"] != "MGCrP", f"representation {a['representation']!r}: only the released "
                                         "models' MGCrP head is converted"),
        (a["normalization"] != "svPN", f"normalization {a['normalization']!r}: only svPN is converted"),
        (bool(a["wr_bias"]), "MGCrP qkv_bias=True: vspec's MGCrP projection has no bias"),
        (layer_norm_eps(a["norm_layer"]) is None, f"norm_layer {a['norm_layer']!r}: only LayerNorm "
                                                  "(nn.LayerNorm or partial(nn.LayerNorm, eps=...))"),
        (not is_gelu(a["act_layer"]), f"act_layer {a['act_layer']!r}: only GELU"),
        (a["drop_rate"] != 0, f"drop_rate {a['drop_rate']}: the released model also drops after the position "
                              "embedding, which vspec has no place for"),
        (a["representation_dim"] not in (None, a["embed_dim"]),
         f"MGCrP dim {a['representation_dim']} differs from embed_dim {a['embed_dim']}"),
        (a["svpn_input_dim"] not in (None, a["wr_dim"]),
         f"svPN input_dim {a['svpn_input_dim']} differs from wr_dim {a['wr_dim']}"),
        (large and token != "DenseNet", f"large_output with {token}: only the DenseNet embedding pools to the "
                                        "56 x 56 grid the released model then hard-codes"),
    ]
    if token in BLOCKS:
        grid = 56 if large else 14
        strides = ((2, 1, 1) if large else (2, 2, img // 112)) if img >= 112 else (2, 2, 0)
        size = img // (2 * strides[0] * strides[1] * strides[2]) if all(strides) else 0
        rules.append((img not in ((224,) if large else (112, 224)),
                      f"img_size {img}: the released SoT hard-codes a {grid} x {grid} token grid and takes its "
                      f"embedding's last stride as img_size // 112 = {img // 112}, which gives "
                      f"{size} x {size} tokens; it builds at {'224' if large else '112 and 224'} px only"))
    elif token == "Naive_linear":
        rules.append((img % 14 != 0, f"img_size {img}: the released naive embedding cuts a 14 x 14 grid of "
                                     f"img_size // 14 px patches, and 14 does not divide {img}"))
    return rules


def _spec(a: dict[str, Any], weights: Mapping | None = None) -> specs.Model:
    """With the weights, the DenseNet dense layers' layout is read from them (BatchNorm, or none: timm 0.3.4);
    without, from `timm_version`."""
    img = a["img_size"]
    if a["token_type"] == "Naive_linear":
        embedder = specs.PatchEmbed(patch_size=img // 14)
    else:
        if weights is not None:
            old = not any(k.endswith(".denselayer1.norm1.weight") for k in weights)
        else:
            old = str(a["timm_version"] or "").startswith("0.3")
        dense_net = a["token_type"] == "DenseNet"
        norm = specs.Norm(kind="none") if dense_net and old else specs.Norm(kind="batchnorm", eps=1e-5)
        embedder = family_spec.SoTEmbed(block=BLOCKS[a["token_type"]], stem_dim=a["token_dim"],
                                        downsample_last=img >= 224, large_output=a["large_output"], dense_norm=norm)
    m, dim = a["wr_dim"], a["embed_dim"]
    return specs.Model(
        embedder=embedder,
        block=released_block(a, ffn=specs.MLP(hidden=int(dim * a["mlp_ratio"])), attn_drop=a["attn_drop"]),
        depth=a["depth"], dim=dim, num_classes=a["num_classes"], img_size=img, in_chans=a["in_chans"],
        pos_embed="sincos1d", drop_path=float(a["drop_path_rate"]),
        head=family_spec.SecondOrderHead(
            fusion=FUSIONS[a["fusion_type"]],
            pool=family_spec.MGCrP(heads=a["mgcrp_heads"], m=m, n=m, centering="scalar"),
            norm=family_spec.SvPN(alpha=float(a["svpn.alpha"]), num_sv=a["svpn.svNum"], iters=a["svpn.iterNum"],
                                  start="learnable", eps=1e-5),
            drop=float(a["dropout"])),
    )


def _two_fc(spec: specs.Model) -> bool:
    """Whether the head keeps the class token's classifier (sum, late): concat and aggr_all build it unused."""
    return spec.head.fusion in ("sum", "late")


def _rules(spec: specs.Model) -> list[Rule]:
    return [
        (r"^pos_embed$", None),  # the fixed sinusoid, checked and recomputed
        (r"^classifier\.cls_fc\.", "head.cls_fc." if _two_fc(spec) else None),
        (r"^visual_tokens\.tokens\.", "embedder."),
        (r"^blocks\.(\d+)\.mlp\.", r"stages.0.blocks.\1.ffn."),
        (r"^blocks\.", "stages.0.blocks."),
        (r"^classifier\.representation\.wr\.", "head.pool.wr."),
        (r"^classifier\.representation\.norm\.weight$", "head.norm.v0"),
        (r"^classifier\.visual_fc\.", "head.word_fc." if _two_fc(spec) else "head.fc."),
    ]


def _notes(a: dict[str, Any], spec: specs.Model, weights: Mapping) -> list[str]:
    unused = sum(v.numel() for k, v in weights.items() if k.startswith("classifier.cls_fc."))
    if _two_fc(spec) or not unused:
        return []
    return [f"classifier.cls_fc ({unused:,} parameters) is built by the released {a['fusion_type']} model but never "
            f"used; vspec leaves it out, so its model has {unused:,} parameters fewer"]


SOT = Released(
    name="SoT",
    # the released constructor's arguments, flat, with their defaults
    arguments={
        "token_type": REQUIRED, "fusion_type": REQUIRED, "embed_dim": REQUIRED, "depth": REQUIRED,
        "num_heads": REQUIRED, "mlp_ratio": REQUIRED, "mgcrp_heads": REQUIRED, "wr_dim": REQUIRED,
        "svpn.alpha": 0.5, "svpn.iterNum": 1, "svpn.svNum": 1, "img_size": 224, "in_chans": 3, "num_classes": 1000,
        "qkv_bias": False, "qk_scale": None, "attn_drop": 0.0, "drop_rate": 0.0, "drop_path_rate": 0.0,
        "token_dim": 64, "large_output": False, "dropout": 0.0, "norm_layer": "LayerNorm", "act_layer": "GELU",
        "representation": "MGCrP", "representation_dim": None, "wr_bias": False, "normalization": "svPN",
        "svpn_input_dim": None,
        "timm_version": None,  # which timm built the model: metadata, the dense-layer layout is read from the weights
    },
    # the constructor's own config dicts (cfg_snapshot.<field>) -> the flat argument each field is
    aliases={
        "cfg_snapshot.visualTokenConfig.type": "token_type", "cfg_snapshot.visualTokenConfig.token_dim": "token_dim",
        "cfg_snapshot.visualTokenConfig.large_output": "large_output",
        **{f"cfg_snapshot.ViTConfig.{k}": k for k in ("embed_dim", "depth", "num_heads", "mlp_ratio", "qkv_bias",
                                                      "qk_scale", "attn_drop", "norm_layer", "act_layer")},
        **{f"cfg_snapshot.representationConfig.{k}": v for k, v in (
            ("type", "representation"), ("fusion_type", "fusion_type"), ("args.dim", "representation_dim"),
            ("args.num_heads", "mgcrp_heads"), ("args.wr_dim", "wr_dim"), ("args.qkv_bias", "wr_bias"),
            ("args.normalization.type", "normalization"), ("args.normalization.input_dim", "svpn_input_dim"),
            *((f"args.normalization.{k}", f"svpn.{k}") for k in ("alpha", "iterNum", "svNum")))},
        "cfg_snapshot.representationConfig.args.normalization.regular": ("dropout", _dropout),
    },
    to_spec=_spec,
    refusals=_refusals,
    checks=(check_sinusoid,),
    notes=_notes,
    rules=_rules,
)
