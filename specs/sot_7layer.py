"""The 7-layer SoT of the ablation studies (SoT Sec. 4.2, supplement A): SoT-Tiny's configuration with
7 layers, the last embedding block without downsampling, 112 x 112 inputs (-> 14 x 14 tokens).

`--set head.kind=class_token` gives Table 3a's strong baseline (class token only); `--set
embedder.block=resnet` (inception, nonlocal) its other token embeddings.
"""

from vspec.spec import MHSA, MLP, Block, MGCrP, Model, Norm, SecondOrderHead, SoTEmbed, SvPN

SPEC = Model(
    embedder=SoTEmbed(block="dense", downsample_last=False),
    block=Block(attention=MHSA(heads=4, qkv_bias=False), ffn=MLP(hidden=600), norm=Norm(eps=1e-5)),
    depth=7,
    dim=240,
    img_size=112,
    pos_embed="sincos1d",
    head=SecondOrderHead(fusion="sum", pool=MGCrP(heads=6, m=14, n=14), norm=SvPN(alpha=0.5)),
)
