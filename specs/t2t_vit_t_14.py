"""T2T-ViT_t-14 (`t2t_vit_t_14`): specs/t2t_vit_14.py with transformer token blocks (one-head softmax attention
at scale (input width)^-0.5, no qkv bias) in place of the performer ones."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("t2t_vit_t_14.py", "t2t_vit_14.py")), {"embedder.block": "transformer"})
