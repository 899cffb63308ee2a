"""T2T-ViT-24 (`t2t_vit_24`): specs/t2t_vit_14.py at 24 x 512, 8 heads, MLP 3x. 64,000,974 trainable
parameters, 64,105,934 with the frozen `w` and table (the released count)."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("t2t_vit_24.py", "t2t_vit_14.py")),
                {"depth": 24, "dim": 512, "block.attention.heads": 8, "block.ffn.ratio": 3.0})
