"""T2T-ViT-14 (yitu-opensource/T2T-ViT `t2t_vit_14`): the tokens-to-token module (performer token blocks,
token_dim 64) then 14 x 384, 6 heads, MLP 3x, no qkv bias, LayerNorm eps 1e-5, the fixed sinusoid table; 224 px.
21,465,806 trainable parameters; 21,545,550 with the random features `w` and the table the released model stores
as frozen parameters (tests/test_t2t.py)."""

from vspec.spec import MHSA, MLP, Block, Model, Norm, T2TEmbed

SPEC = Model(embedder=T2TEmbed(), block=Block(attention=MHSA(heads=6, qkv_bias=False), ffn=MLP(ratio=3.0),
                                              norm=Norm(eps=1e-5)),
             depth=14, dim=384, pos_embed="sincos1d")
