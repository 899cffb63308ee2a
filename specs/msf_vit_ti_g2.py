"""SimpleViT-Ti/16 MSF with 2-group interleaved projections (QUERY, KEY, VALUE, PROBE grouped): the released
model (MSFtransformer, simple_vit_flexatt.py, att = "msf-g2"); Table 6: 5.20/2.32 M weight-matrix params / G FLOPs."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("msf_vit_ti_g2.py", "msf_vit_ti.py")), {
    "block.attention.projections.groups": 2,
})
