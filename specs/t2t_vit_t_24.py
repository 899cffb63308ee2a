"""T2T-ViT_t-24 (`t2t_vit_t_24`): specs/t2t_vit_24.py with transformer token blocks in place of the performer
ones."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("t2t_vit_t_24.py", "t2t_vit_24.py")), {"embedder.block": "transformer"})
