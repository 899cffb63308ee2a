"""LV-ViT-L (Jiang et al., "All tokens matter"; the released `lvvit_l`): 24 blocks x 768, 12 heads, MLP 3x, no qkv
bias, LayerNorm eps 1e-5, residual branches divided by 3; the 128-wide CNN patch stem (conv 7x7 s2, two 3x3, each
BatchNorm + ReLU, then an 8 x 8 projection), learned position table, class-token head with the dense auxiliary head
(eval logits = class logits + 0.5 x the max over patch tokens of the auxiliary logits); 224 px. 150,021,968
parameters (tests/models/lvvit/test_presets.py); published weights at 448 and 512 px (lvvit_l_448, lvvit_l_512)."""

from vspec.spec import MHSA, MLP, ClassTokenHead, ConvStem, DenseAux, Model, Norm, RescaledBlock

SPEC = Model(embedder=ConvStem(patch_size=16, width=128, growth=1),
             block=RescaledBlock(attention=MHSA(heads=12, qkv_bias=False), ffn=MLP(ratio=3.0), norm=Norm(eps=1e-5),
                                 skip_lam=3.0),
             depth=24, dim=768, head=ClassTokenHead(dense=DenseAux(mix_token=True)))
