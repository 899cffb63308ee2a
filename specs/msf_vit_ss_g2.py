"""SimpleViT-SS/16 MSF with 2-group interleaved projections (QUERY, KEY, VALUE, PROBE grouped): the released
model (MSFtransformer, simple_vit_flexatt.py, att = "msf-g2"); Table 6: 10.41/4.29 M weight-matrix params / G FLOPs."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("msf_vit_ss_g2.py", "msf_vit_ss.py")), {
    "block.attention.projections.groups": 2,
})
