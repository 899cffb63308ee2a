"""SoT-Base, the released structure (Table S-1): 24 layers of width 528, 8 heads, MLP 1584, MGCrP
6 heads 38 x 38, dropout 0.7 on the representation; otherwise as SoT-Tiny."""

from vspec.spec import MHSA, MLP, Block, MGCrP, Model, Norm, SecondOrderHead, SoTEmbed, SvPN

SPEC = Model(
    embedder=SoTEmbed(block="dense"),
    block=Block(attention=MHSA(heads=8, qkv_bias=False), ffn=MLP(hidden=1584), norm=Norm(eps=1e-5)),
    depth=24,
    dim=528,
    pos_embed="sincos1d",
    head=SecondOrderHead(fusion="sum", pool=MGCrP(heads=6, m=38, n=38), norm=SvPN(alpha=0.5), drop=0.7),
)
