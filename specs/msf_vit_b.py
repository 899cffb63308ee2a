"""SimpleViT-B/16 MSF (Eq. 12, projections QKVPW untied): the released
model (MSFtransformer, simple_vit_flexatt.py, att = "msf"); Table 6: 93.37/37.73 M weight-matrix params / G FLOPs."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("msf_vit_b.py", "simplevit_b.py")), {
    "block.attention.kind": "mean_shift",
})
