"""SimpleViT-B/16, the MSF paper's "orig" B backbone (Table 5; Table 6: 86.29/34.96 M weight-matrix params / G
FLOPs): 12 x 768, 12 heads of 64 channels. Released-code structure as in simplevit_s.py."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("simplevit_b.py", "simplevit_s.py")), {
    "dim": 768,
    "block.attention.heads": 12,
})
