"""SimpleViT-B/16 MSF with 2-group interleaved projections (QUERY, KEY, VALUE, PROBE grouped): the released
model (MSFtransformer, simple_vit_flexatt.py, att = "msf-g2"); Table 6: 79.21/32.18 M weight-matrix params / G FLOPs."""

from vspec.spec import MLP, Block, GAPHead, MeanShiftAttention, Model, Norm, Projections, SimplePatchEmbed

SPEC = Model(
    embedder=SimplePatchEmbed(patch_size=16, norm=Norm(eps=1e-5)),
    block=Block(attention=MeanShiftAttention(heads=12, head_dim=64, qkv_bias=False, proj_bias=False,
                                             projections=Projections(groups=2)),
                ffn=MLP(ratio=4.0), norm=Norm(eps=1e-5)),
    depth=12,
    dim=768,
    class_token=False,
    pos_embed="sincos2d",
    final_norm=False,
    head=GAPHead(norm=Norm(eps=1e-5)),
)
