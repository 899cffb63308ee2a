"""The SoT authors' released models (SoT repository, class `SoT`) -> vspec.

`config` is the official constructor configuration as stored in the fixtures: token_type,
fusion_type, embed_dim, depth, num_heads, mlp_ratio, mgcrp_heads, wr_dim, svpn{alpha, iterNum,
svNum}, img_size, num_classes (and optionally cfg_snapshot.visualTokenConfig.token_dim).
Released-code facts it encodes: qkv without bias, torch's LayerNorm (eps 1e-5), a fixed 1-D sinusoid
position embedding over class token and patches, MGCrP with m = n = wr_dim and scalar centering,
approximate svPN from a learnable start vector (eps 1e-5).
"""

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .. import spec as S
from ..compiler import build
from ..ops import sincos_1d
from .common import ConversionError, load_mapped, renamer

BLOCKS = {"DenseNet": "dense", "ResNet": "resnet", "Inception": "inception", "Non-local": "nonlocal"}
FUSIONS = {"sum_fc": "sum", "concat": "concat", "aggre_all": "aggr_all", "sum_loss": "late"}


def spec_from_config(config: Mapping[str, Any]) -> S.Model:
    """The vspec Model spec of a released SoT configuration."""
    try:
        block = BLOCKS[config["token_type"]]
        fusion = FUSIONS[config["fusion_type"]]
    except KeyError as e:
        raise ConversionError(f"SoT config: unknown or missing {e}; token_type in {sorted(BLOCKS)}, "
                              f"fusion_type in {sorted(FUSIONS)}") from None
    svpn = config.get("svpn", {})
    stem = config.get("cfg_snapshot", {}).get("visualTokenConfig", {}).get("token_dim", 64)
    m = config["wr_dim"]
    return S.Model(
        embedder=S.SoTEmbed(block=block, stem_dim=stem),
        block=S.Block(attention=S.MHSA(heads=config["num_heads"], qkv_bias=False),
                      ffn=S.MLP(hidden=int(config["embed_dim"] * config["mlp_ratio"])), norm=S.Norm(eps=1e-5)),
        depth=config["depth"], dim=config["embed_dim"], num_classes=config["num_classes"],
        img_size=config.get("img_size", 224), pos_embed="sincos1d",
        head=S.SecondOrderHead(
            fusion=fusion, pool=S.MGCrP(heads=config["mgcrp_heads"], m=m, n=m, centering="scalar"),
            norm=S.SvPN(alpha=float(svpn.get("alpha", 0.5)), num_sv=svpn.get("svNum", 1), iters=svpn.get("iterNum", 1),
                        start="learnable", eps=1e-5),
            drop=float(config.get("dropout", 0.0))),
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
    spec = spec_from_config(config)
    if "pos_embed" in state_dict:
        tokens = S.embedded(spec)
        table = sincos_1d(tokens.length, tokens.dim)[None]
        if tuple(state_dict["pos_embed"].shape) != tuple(table.shape) or \
                not torch.allclose(state_dict["pos_embed"].float(), table, atol=1e-5):
            raise ConversionError("pos_embed is not the fixed 1-D sinusoid table the released SoT uses")
    return load_mapped(build(spec), state_dict, _rename(spec.head.fusion))
