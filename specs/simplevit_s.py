"""SimpleViT-S/16, the MSF paper's baseline backbone (Table 5 / 6, "orig" S).

Released-code structure: patchify -> LayerNorm -> Linear -> LayerNorm embedding, fixed 2-D sin-cos
position embedding, no class token, attention projections without bias, head dim 64, FFN with bias,
mean over tokens -> LayerNorm -> Linear head; LayerNorm eps 1e-5 (PyTorch default) throughout.
"""

from vspec.spec import MHSA, MLP, Block, GAPHead, Model, Norm, SimplePatchEmbed

SPEC = Model(
    embedder=SimplePatchEmbed(patch_size=16, norm=Norm(eps=1e-5)),
    block=Block(attention=MHSA(heads=6, head_dim=64, qkv_bias=False, proj_bias=False),
                ffn=MLP(ratio=4.0), norm=Norm(eps=1e-5)),
    depth=12,
    dim=384,
    class_token=False,
    pos_embed="sincos2d",
    final_norm=False,
    head=GAPHead(norm=Norm(eps=1e-5)),
)
