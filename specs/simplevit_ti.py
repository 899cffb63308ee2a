"""SimpleViT-Ti/16, the MSF paper's "orig" Ti backbone (Table 5; Table 6: 5.65/2.50 M weight-matrix params / G
FLOPs): 12 x 192, 3 heads of 64 channels. Released-code structure as in simplevit_s.py."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("simplevit_ti.py", "simplevit_s.py")), {
    "dim": 192,
    "block.attention.heads": 3,
})
