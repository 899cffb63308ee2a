"""T2T-ViT-7 (`t2t_vit_7`): specs/t2t_vit_14.py at 7 x 256, 4 heads, MLP 2x. 4,255,694 trainable
parameters, 4,310,222 with the frozen `w` and table (the released count)."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("t2t_vit_7.py", "t2t_vit_14.py")),
                {"depth": 7, "dim": 256, "block.attention.heads": 4, "block.ffn.ratio": 2.0})
