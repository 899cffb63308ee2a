"""Swin-S (specs/swin_small.py) with mean-shift window attention (Eq. 12, QKVPW untied):
MSF Table 6's Swin-S row, 53.36/18.88 M weight-matrix params / G FLOPs. The released MSF code has no Swin:
this is vspec's construction (WindowMeanShiftAttention: Swin's windows, shift and relative position bias,
added to the Gaussian scores; Swin's qkv / proj biases kept)."""

from vspec.spec import Block, GAPHead, Model, Norm, PatchEmbed, PatchMerging, Stage, WindowMeanShiftAttention

LN = Norm(eps=1e-5)

SPEC = Model(
    embedder=PatchEmbed(patch_size=4, norm=LN),
    stages=[Stage(depth=depth, dim=96 * 2**i,
                  block=Block(attention=WindowMeanShiftAttention(heads=heads, window=7), norm=LN),
                  entry=PatchMerging(norm=LN) if i else None)
            for i, (depth, heads) in enumerate(zip((2, 2, 18, 2), (3, 6, 12, 24)))],
    class_token=False,
    pos_embed="none",
    head=GAPHead(),
    drop_path=0.3,
)
