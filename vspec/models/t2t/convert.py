"""The T2T-ViT authors' released models (yitu-opensource/T2T-ViT, models/t2t_vit.py:T2T_ViT) -> vspec.

`config` holds the released constructor's arguments (`ARGUMENTS`, its defaults for those left out). Every one is
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

import torch
from torch import nn

from ... import spec as S
from ...compiler import build
from ...convert.common import (
    ISOTROPIC_BODY,
    check_sinusoid,
    layer_norm_eps,
    load_mapped,
    read_arguments,
    refuse,
    renamer,
)
from . import spec as P

ARGUMENTS: dict[str, Any] = {
    "img_size": 224, "tokens_type": "performer", "in_chans": 3, "num_classes": 1000, "embed_dim": 768, "depth": 12,
    "num_heads": 12, "mlp_ratio": 4.0, "qkv_bias": False, "qk_scale": None, "drop_rate": 0.0, "attn_drop_rate": 0.0,
    "drop_path_rate": 0.0, "norm_layer": "LayerNorm", "token_dim": 64,
}
TOKENS_TYPES = ("performer", "transformer")


def _side(img: Any) -> Any:
    if isinstance(img, (list, tuple)) and len(img) == 2 and img[0] == img[1]:
        return img[0]
    return img


def spec_from_config(config: Mapping[str, Any]) -> S.Model:
    a = read_arguments("T2T", config, ARGUMENTS)
    eps, img = layer_norm_eps(a["norm_layer"]), _side(a["img_size"])
    refuse("T2T", [
        (a["tokens_type"] not in TOKENS_TYPES, f"tokens_type {a['tokens_type']!r}: vspec builds performer and "
                                               "transformer (the convolution form is another module)"),
        (eps is None, f"norm_layer {a['norm_layer']!r}: only torch's LayerNorm (any eps)"),
        (not isinstance(img, int) or isinstance(img, bool) or img % 16 or img < 16,
         f"img_size {a['img_size']!r}: the released model takes a square side that is a multiple of 16"),
        (a["drop_rate"] != 0, f"drop_rate {a['drop_rate']}: the released model also drops after the position table, "
                              "which vspec has no place for (set the spec's dropouts instead)"),
    ])
    dim = a["embed_dim"]
    block = S.Block(attention=S.MHSA(heads=a["num_heads"], qkv_bias=a["qkv_bias"], scale=a["qk_scale"],
                                     attn_drop=float(a["attn_drop_rate"])),
                    ffn=S.MLP(hidden=int(dim * a["mlp_ratio"])), norm=S.Norm(eps=eps))
    return S.Model(embedder=P.T2TEmbed(token_dim=a["token_dim"], block=a["tokens_type"]), block=block,
                   depth=a["depth"], dim=dim, num_classes=a["num_classes"], img_size=img, in_chans=a["in_chans"],
                   pos_embed="sincos1d", drop_path=float(a["drop_path_rate"]))


RULES = [
    (r"^tokens_to_token\.attention(\d)\.", lambda m: f"embedder.blocks.{int(m[1]) - 1}."),
    (r"^tokens_to_token\.project\.", "embedder.project."),
    *ISOTROPIC_BODY,
]
TOKEN_BLOCK = [(r"\.attn\.(qkv|proj)\.", r".\1."), (r"\.mlp\.0\.", ".mlp.fc1."), (r"\.mlp\.2\.", ".mlp.fc2.")]


def _rename(key: str) -> str | None:
    if key == "pos_embed":
        return None  # the fixed table, checked and recomputed
    key = renamer(RULES)(key)
    return renamer(TOKEN_BLOCK)(key) if key.startswith("embedder.blocks.") else key


def from_official_t2t(state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> nn.Module:
    spec = spec_from_config(config)
    check_sinusoid(state_dict, spec)
    return load_mapped(build(spec), state_dict, _rename)
