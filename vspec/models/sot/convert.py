"""The SoT authors' released models (SoT repository, class `SoT`) -> vspec.

`config` holds the released constructor's arguments, flat as the fixtures store them (`ARGUMENTS`), and
may hold the constructor's own config dicts under `cfg_snapshot` (visualTokenConfig, ViTConfig,
representationConfig; `SNAPSHOT` says which argument each field is). Where both give an argument they
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
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ... import spec as S
from ...compiler import build
from ...convert.common import (
    ConversionError,
    ConversionNote,
    check_sinusoid,
    is_gelu,
    layer_norm_eps,
    load_mapped,
    renamer,
)
from . import spec as P

BLOCKS = {"DenseNet": "dense", "ResNet": "resnet", "Inception": "inception"}
TOKEN_TYPES = (*BLOCKS, "Naive_linear", "Non-local")
FUSIONS = {"sum_fc": "sum", "concat": "concat", "aggre_all": "aggr_all", "sum_loss": "late"}
REQUIRED = object()

# the released constructor's arguments, flat, with their defaults
ARGUMENTS: dict[str, Any] = {
    "token_type": REQUIRED, "fusion_type": REQUIRED, "embed_dim": REQUIRED, "depth": REQUIRED,
    "num_heads": REQUIRED, "mlp_ratio": REQUIRED, "mgcrp_heads": REQUIRED, "wr_dim": REQUIRED,
    "svpn.alpha": 0.5, "svpn.iterNum": 1, "svpn.svNum": 1, "img_size": 224, "in_chans": 3, "num_classes": 1000,
    "qkv_bias": False, "qk_scale": None, "attn_drop": 0.0, "drop_rate": 0.0, "drop_path_rate": 0.0,
    "token_dim": 64, "large_output": False, "dropout": 0.0, "norm_layer": "LayerNorm", "act_layer": "GELU",
    "representation": "MGCrP", "representation_dim": None, "wr_bias": False, "normalization": "svPN",
    "svpn_input_dim": None,
    "timm_version": None,  # which timm built the model: metadata, the dense-layer layout is read from the weights
}
# cfg_snapshot field -> argument
SNAPSHOT = {
    "visualTokenConfig.type": "token_type", "visualTokenConfig.token_dim": "token_dim",
    "visualTokenConfig.large_output": "large_output",
    **{f"ViTConfig.{k}": k for k in ("embed_dim", "depth", "num_heads", "mlp_ratio", "qkv_bias", "qk_scale",
                                     "attn_drop", "norm_layer", "act_layer")},
    "representationConfig.type": "representation", "representationConfig.fusion_type": "fusion_type",
    "representationConfig.args.dim": "representation_dim", "representationConfig.args.num_heads": "mgcrp_heads",
    "representationConfig.args.wr_dim": "wr_dim", "representationConfig.args.qkv_bias": "wr_bias",
    "representationConfig.args.normalization.type": "normalization",
    **{f"representationConfig.args.normalization.{k}": f"svpn.{k}" for k in ("alpha", "iterNum", "svNum")},
    "representationConfig.args.normalization.regular": "dropout",
    "representationConfig.args.normalization.input_dim": "svpn_input_dim",
}


def _leaves(tree: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        out += _leaves(value, f"{path}.") if isinstance(value, Mapping) else [(path, value)]
    return out


def _dropout(value: Any) -> Any:
    """The snapshot's `regular`: None, or nn.Dropout written out as "Dropout(p=0.5, ...)"."""
    if value is None:
        return 0.0
    match = re.fullmatch(r"Dropout\(p=([\d.]+).*\)", str(value))
    if match is None:
        raise ConversionError(f"SoT config: normalization regular {value!r} is not a dropout vspec can read")
    return float(match[1])


def arguments(config: Mapping[str, Any]) -> dict[str, Any]:
    """Every constructor argument of a released SoT configuration, by its flat name, defaults filled in.
    Unknown arguments, and arguments given twice with different values, are errors."""
    if not isinstance(config, Mapping):
        raise ConversionError(f"SoT config: must be a table of constructor arguments, got {type(config).__name__}")
    given: dict[str, Any] = {}
    source: dict[str, str] = {}

    def put(name: str, value: Any, where: str) -> None:
        if name in given and given[name] != value:
            raise ConversionError(f"SoT config: {where} is {value!r} but {source[name]} is {given[name]!r}")
        given[name], source[name] = value, where

    snapshot = config.get("cfg_snapshot") or {}
    for path, value in _leaves(snapshot):
        if path not in SNAPSHOT:
            raise ConversionError(f"SoT config: cfg_snapshot.{path} is not an argument the released SoT takes")
        put(SNAPSHOT[path], _dropout(value) if path.endswith(".regular") else value, f"cfg_snapshot.{path}")
    for key, value in config.items():
        if key == "cfg_snapshot":
            continue
        pairs = [(f"svpn.{k}", v) for k, v in value.items()] if key == "svpn" and isinstance(value, Mapping) \
            else [(key, value)]
        for name, v in pairs:
            if name not in ARGUMENTS:
                raise ConversionError(f"SoT config: unknown argument {name!r}; known: {', '.join(ARGUMENTS)}")
            put(name, v, name)
    missing = [k for k, d in ARGUMENTS.items() if d is REQUIRED and k not in given]
    if missing:
        raise ConversionError(f"SoT config: missing {', '.join(missing)}")
    return {**ARGUMENTS, **given}


def _refuse(args: dict[str, Any]) -> None:
    """One-line errors for what vspec does not convert, or the released code cannot build."""
    token, img, large = args["token_type"], args["img_size"], args["large_output"]
    rules = [
        (token not in TOKEN_TYPES, f"token_type {token!r}; known: {', '.join(TOKEN_TYPES)}"),
        (token == "Non-local", "token_type 'Non-local': the released non-local embedding (two strided convs, each "
                               "with a non-local block) is not vspec's nonlocal construction and is not converted"),
        (args["fusion_type"] not in FUSIONS, f"fusion_type {args['fusion_type']!r}; known: {', '.join(FUSIONS)}"),
        (args["representation"] != "MGCrP", f"representation {args['representation']!r}: only the released "
                                            "models' MGCrP head is converted"),
        (args["normalization"] != "svPN", f"normalization {args['normalization']!r}: only svPN is converted"),
        (bool(args["wr_bias"]), "MGCrP qkv_bias=True: vspec's MGCrP projection has no bias"),
        (layer_norm_eps(args["norm_layer"]) is None, f"norm_layer {args['norm_layer']!r}: only LayerNorm "
                                                     "(nn.LayerNorm or partial(nn.LayerNorm, eps=...))"),
        (not is_gelu(args["act_layer"]), f"act_layer {args['act_layer']!r}: only GELU"),
        (args["drop_rate"] != 0, f"drop_rate {args['drop_rate']}: the released model also drops after the position "
                                 "embedding, which vspec has no place for"),
        (args["representation_dim"] not in (None, args["embed_dim"]),
         f"MGCrP dim {args['representation_dim']} differs from embed_dim {args['embed_dim']}"),
        (args["svpn_input_dim"] not in (None, args["wr_dim"]),
         f"svPN input_dim {args['svpn_input_dim']} differs from wr_dim {args['wr_dim']}"),
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
    for refused, why in rules:
        if refused:
            raise ConversionError(f"SoT config: {why}")


def spec_from_config(config: Mapping[str, Any], state_dict: Mapping[str, torch.Tensor] | None = None) -> S.Model:
    """The vspec Model spec of a released SoT configuration. With the weights, the DenseNet dense layers'
    layout is read from them (BatchNorm, or none: timm 0.3.4); without, from `timm_version`."""
    a = arguments(config)
    _refuse(a)
    img = a["img_size"]
    if a["token_type"] == "Naive_linear":
        embedder = S.PatchEmbed(patch_size=img // 14)
    else:
        if state_dict is not None:
            old = not any(k.endswith(".denselayer1.norm1.weight") for k in state_dict)
        else:
            old = str(a["timm_version"] or "").startswith("0.3")
        norm = S.Norm(kind="none") if a["token_type"] == "DenseNet" and old else S.Norm(kind="batchnorm", eps=1e-5)
        embedder = P.SoTEmbed(block=BLOCKS[a["token_type"]], stem_dim=a["token_dim"], downsample_last=img >= 224,
                              large_output=a["large_output"], dense_norm=norm)
    m, dim = a["wr_dim"], a["embed_dim"]
    return S.Model(
        embedder=embedder,
        block=S.Block(attention=S.MHSA(heads=a["num_heads"], qkv_bias=a["qkv_bias"], scale=a["qk_scale"],
                                       attn_drop=a["attn_drop"]),
                      ffn=S.MLP(hidden=int(dim * a["mlp_ratio"])), norm=S.Norm(eps=layer_norm_eps(a["norm_layer"]))),
        depth=a["depth"], dim=dim, num_classes=a["num_classes"], img_size=img, in_chans=a["in_chans"],
        pos_embed="sincos1d", drop_path=float(a["drop_path_rate"]),
        head=P.SecondOrderHead(
            fusion=FUSIONS[a["fusion_type"]], pool=P.MGCrP(heads=a["mgcrp_heads"], m=m, n=m, centering="scalar"),
            norm=P.SvPN(alpha=float(a["svpn.alpha"]), num_sv=a["svpn.svNum"], iters=a["svpn.iterNum"],
                        start="learnable", eps=1e-5),
            drop=float(a["dropout"])),
    )


def _rename(fusion: str):
    word_fc = "head.word_fc." if fusion in ("sum", "late") else "head.fc."
    rules = [
        (r"^visual_tokens\.tokens\.", "embedder."),
        (r"^blocks\.(\d+)\.mlp\.", r"stages.0.blocks.\1.ffn."),
        (r"^blocks\.", "stages.0.blocks."),
        (r"^classifier\.representation\.wr\.", "head.pool.wr."),
        (r"^classifier\.representation\.norm\.weight$", "head.norm.v0"),
        (r"^classifier\.visual_fc\.", word_fc),
    ]

    by_rules = renamer(rules)

    def rename(key: str) -> str | None:
        if key == "pos_embed":
            return None  # fixed sinusoid, recomputed (checked in from_official_sot)
        if key.startswith("classifier.cls_fc."):
            return "head.cls_fc." + key.rsplit(".", 1)[1] if fusion in ("sum", "late") else None  # built, unused
        return by_rules(key)

    return rename


def from_official_sot(state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> nn.Module:
    spec = spec_from_config(config, state_dict)
    check_sinusoid(state_dict, spec)
    unused = sum(v.numel() for k, v in state_dict.items() if k.startswith("classifier.cls_fc."))
    if spec.head.fusion in ("concat", "aggr_all") and unused:
        warnings.warn(ConversionNote(
            f"classifier.cls_fc ({unused:,} parameters) is built by the released {config.get('fusion_type')} model "
            f"but never used; vspec leaves it out, so its model has {unused:,} parameters fewer"), stacklevel=3)
    return load_mapped(build(spec), state_dict, _rename(spec.head.fusion))
