"""T2T-ViT-12 (`t2t_vit_12`): specs/t2t_vit_14.py at 12 x 256, 4 heads, MLP 2x. 6,887,374 trainable
parameters, 6,941,902 with the frozen `w` and table (the released count)."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("t2t_vit_12.py", "t2t_vit_14.py")),
                {"depth": 12, "dim": 256, "block.attention.heads": 4, "block.ffn.ratio": 2.0})
