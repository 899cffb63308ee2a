"""Swin-S (specs/swin_small.py) with mean-shift window attention and 2-group interleaved projections
(QUERY, KEY, VALUE, PROBE grouped): MSF Table 6's Swin-S "w/ 2-group" row, 45.51/16.10 M weight-matrix params /
G FLOPs. The released MSF code has no Swin: this is vspec's construction (WindowMeanShiftAttention:
Swin's windows, shift and relative position bias, added to the Gaussian scores; Swin's qkv / proj
biases kept)."""

from vspec.spec import Block, GAPHead, Model, Norm, PatchEmbed, PatchMerging, Projections, Stage
from vspec.spec import WindowMeanShiftAttention as MSF

LN = Norm(eps=1e-5)

SPEC = Model(
    embedder=PatchEmbed(patch_size=4, norm=LN),
    stages=[Stage(depth=depth, dim=96 * 2**i,
                  block=Block(attention=MSF(heads=heads, window=7, projections=Projections(groups=2)), norm=LN),
                  entry=PatchMerging(norm=LN) if i else None)
            for i, (depth, heads) in enumerate(zip((2, 2, 18, 2), (3, 6, 12, 24)))],
    class_token=False,
    pos_embed="none",
    head=GAPHead(),
    drop_path=0.3,
)
