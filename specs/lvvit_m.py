"""LV-ViT-M (Jiang et al., "All tokens matter"; the released `lvvit_m`): 20 blocks x 512, 8 heads, MLP 3x, no qkv bias,
LayerNorm eps 1e-5, residual branches divided by 2; the 64-wide CNN patch stem (conv 7x7 s2, two 3x3, each BatchNorm
+ ReLU, then an 8 x 8 projection), learned position table, class-token head with the dense auxiliary head (eval
logits = class logits + 0.5 x the max over patch tokens of the auxiliary logits); 224 px. 55,830,544 parameters
(tests/models/lvvit/test_presets.py)."""

from vspec.models.lvvit.weights import released
from vspec.spec import MHSA, MLP, ClassTokenHead, ConvStem, DenseAux, Model, Norm, RescaledBlock

SPEC = Model(embedder=ConvStem(patch_size=16, width=64, growth=1),
             block=RescaledBlock(attention=MHSA(heads=8, qkv_bias=False), ffn=MLP(ratio=3.0), norm=Norm(eps=1e-5),
                                 skip_lam=2.0),
             depth=20, dim=512, head=ClassTokenHead(dense=DenseAux(mix_token=True)))

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {"released": released("lvvit_m", "1.0/lvvit_m-56M-224-84.0.pth.tar", params=55_830_544, top1=84.0)}
