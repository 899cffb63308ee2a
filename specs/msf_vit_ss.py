"""SimpleViT-SS/16 MSF (Eq. 12, projections QKVPW untied): the released
model (MSFtransformer, simple_vit_flexatt.py, att = "msf"); Table 6: 12.18/4.98 M weight-matrix params / G FLOPs."""

from vspec.spec import MLP, Block, GAPHead, MeanShiftAttention, Model, Norm, SimplePatchEmbed

SPEC = Model(
    embedder=SimplePatchEmbed(patch_size=16, norm=Norm(eps=1e-5)),
    block=Block(attention=MeanShiftAttention(heads=6, head_dim=64, qkv_bias=False, proj_bias=False),
                ffn=MLP(ratio=4.0), norm=Norm(eps=1e-5)),
    depth=6,
    dim=384,
    class_token=False,
    pos_embed="sincos2d",
    final_norm=False,
    head=GAPHead(norm=Norm(eps=1e-5)),
)
