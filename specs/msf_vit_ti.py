"""SimpleViT-Ti/16 MSF (Eq. 12, projections QKVPW untied): the released
model (MSFtransformer, simple_vit_flexatt.py, att = "msf"); Table 6: 6.09/2.67 M weight-matrix params / G FLOPs."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("msf_vit_ti.py", "simplevit_ti.py")), {
    "block.attention.kind": "mean_shift",
})
