"""SimpleViT-S/16 MSF (Eq. 12, projections QKVPW untied): the released
model (MSFtransformer, simple_vit_flexatt.py, att = "msf"); Table 6: 23.68/9.85 M weight-matrix params / G FLOPs."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("msf_vit_s.py", "simplevit_s.py")), {
    "block.attention.kind": "mean_shift",
})
