"""SimpleViT-B/16, the MSF paper's "orig" B backbone (Table 5; Table 6: 86.29/34.96 M weight-matrix params / G
FLOPs): 12 x 768, 12 heads of 64 channels. Released-code structure as in simplevit_s.py."""

from vspec.spec import MHSA, MLP, Block, GAPHead, Model, Norm, SimplePatchEmbed

SPEC = Model(
    embedder=SimplePatchEmbed(patch_size=16, norm=Norm(eps=1e-5)),
    block=Block(attention=MHSA(heads=12, head_dim=64, qkv_bias=False, proj_bias=False),
                ffn=MLP(ratio=4.0), norm=Norm(eps=1e-5)),
    depth=12,
    dim=768,
    class_token=False,
    pos_embed="sincos2d",
    final_norm=False,
    head=GAPHead(norm=Norm(eps=1e-5)),
)
