"""LV-ViT-T (Jiang et al., "All tokens matter"; the released `lvvit_t`): 12 blocks x 240, 4 heads, MLP 3x, no qkv bias,
LayerNorm eps 1e-5, the plain pre-norm block (skip_lam 1); the 64-wide CNN patch stem (conv 7x7 s2, two 3x3, each
BatchNorm + ReLU, then an 8 x 8 projection), learned position table, class-token head with the dense auxiliary head
(eval logits = class logits + 0.5 x the max over patch tokens of the auxiliary logits); 224 px. 8,534,720 parameters
(tests/models/lvvit/test_presets.py)."""

from vspec.models.lvvit.weights import released
from vspec.spec import MHSA, MLP, Block, ClassTokenHead, ConvStem, DenseAux, Model, Norm

SPEC = Model(embedder=ConvStem(patch_size=16, width=64, growth=1),
             block=Block(attention=MHSA(heads=4, qkv_bias=False), ffn=MLP(ratio=3.0), norm=Norm(eps=1e-5)),
             depth=12, dim=240, head=ClassTokenHead(dense=DenseAux(mix_token=True)))

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {"released": released("lvvit_t", "v0.2.0/lvvit_t.pth", params=8_534_720, top1=79.1)}
