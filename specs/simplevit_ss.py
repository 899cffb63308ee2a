"""SimpleViT-SS/16, the MSF paper's "orig" SS backbone (Table 5; Table 6: 11.30/4.64 M weight-matrix params / G
FLOPs): 6 x 384, 6 heads of 64 channels. Released-code structure as in simplevit_s.py."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("simplevit_ss.py", "simplevit_s.py")), {
    "depth": 6,
})
