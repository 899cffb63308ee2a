"""`vspec compare`'s DHVT: compare_vit.py with DHVT's parts (DHVT paper): the SOPE convolutional patch embedding
(patch 8: three conv units) and no position embedding, DAFF (ratio 2) in place of the MLP, head tokens in every
block (a head_tokens block)."""

from pathlib import Path

from vspec.spec import DAFF, SOPE, load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("compare_vit.py")), {
    "embedder": SOPE(patch_size=8), "pos_embed": "none", "block": "head_tokens", "block.ffn": DAFF(ratio=2.0),
})
