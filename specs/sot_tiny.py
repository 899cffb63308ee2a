"""SoT-Tiny, the released structure (SoT supplement Table S-1): DenseNet token embedding, 12 layers of
width 240 with 4 heads and MLP 600, SoT head with sum fusion over MGCrP (6 heads, 14 x 14) and
approximate svPN (1 singular value, 1 iteration, learnable start). Released-code details: qkv without
bias, torch LayerNorm (eps 1e-5), fixed 1-D sinusoid position embedding.
"""

from vspec.spec import MHSA, MLP, Block, MGCrP, Model, Norm, SecondOrderHead, SoTEmbed, SvPN

SPEC = Model(
    embedder=SoTEmbed(block="dense"),
    block=Block(attention=MHSA(heads=4, qkv_bias=False), ffn=MLP(hidden=600), norm=Norm(eps=1e-5)),
    depth=12,
    dim=240,
    pos_embed="sincos1d",
    head=SecondOrderHead(fusion="sum", pool=MGCrP(heads=6, m=14, n=14), norm=SvPN(alpha=0.5), drop=0.0),
)
