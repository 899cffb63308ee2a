"""SimpleViT-SS/16, the MSF paper's "orig" SS backbone (Table 5; Table 6: 11.30/4.64 M weight-matrix params / G
FLOPs): 6 x 384, 6 heads of 64 channels. Released-code structure as in simplevit_s.py."""

from vspec.spec import MHSA, MLP, Block, GAPHead, Model, Norm, SimplePatchEmbed

SPEC = Model(
    embedder=SimplePatchEmbed(patch_size=16, norm=Norm(eps=1e-5)),
    block=Block(attention=MHSA(heads=6, head_dim=64, qkv_bias=False, proj_bias=False),
                ffn=MLP(ratio=4.0), norm=Norm(eps=1e-5)),
    depth=6,
    dim=384,
    class_token=False,
    pos_embed="sincos2d",
    final_norm=False,
    head=GAPHead(norm=Norm(eps=1e-5)),
)
