"""SoT-Small, the released structure (Table S-1): 14 layers of width 384, 6 heads, MLP 1344, MGCrP
6 heads 24 x 24, dropout 0.5 on the representation; otherwise as SoT-Tiny."""

from vspec.spec import MHSA, MLP, Block, MGCrP, Model, Norm, SecondOrderHead, SoTEmbed, SvPN

SPEC = Model(
    embedder=SoTEmbed(block="dense"),
    block=Block(attention=MHSA(heads=6, qkv_bias=False), ffn=MLP(hidden=1344), norm=Norm(eps=1e-5)),
    depth=14,
    dim=384,
    pos_embed="sincos1d",
    head=SecondOrderHead(fusion="sum", pool=MGCrP(heads=6, m=24, n=24), norm=SvPN(alpha=0.5), drop=0.5),
)
