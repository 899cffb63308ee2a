"""SimpleViT-Ti/16, the MSF paper's "orig" Ti backbone (Table 5; Table 6: 5.65/2.50 M weight-matrix params / G
FLOPs): 12 x 192, 3 heads of 64 channels. Released-code structure as in simplevit_s.py."""

from vspec.spec import MHSA, MLP, Block, GAPHead, Model, Norm, SimplePatchEmbed

SPEC = Model(
    embedder=SimplePatchEmbed(patch_size=16, norm=Norm(eps=1e-5)),
    block=Block(attention=MHSA(heads=3, head_dim=64, qkv_bias=False, proj_bias=False),
                ffn=MLP(ratio=4.0), norm=Norm(eps=1e-5)),
    depth=12,
    dim=192,
    class_token=False,
    pos_embed="sincos2d",
    final_norm=False,
    head=GAPHead(norm=Norm(eps=1e-5)),
)
