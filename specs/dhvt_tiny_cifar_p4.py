"""DHVT-T for CIFAR-100 at patch size 4 (DHVT paper; released structure): SOPE (2 conv units),
12 blocks of width 192 with 4 heads, head tokens (HI-MHSA) and DAFF (ratio 4), no position
embedding, class-token head, 32 x 32 inputs, 100 classes. The other DHVT presets are overrides of
this one."""

from vspec.spec import DAFF, MHSA, SOPE, HeadTokenBlock, HeadTokens, Model

SPEC = Model(
    embedder=SOPE(patch_size=4),
    block=HeadTokenBlock(attention=MHSA(heads=4), ffn=DAFF(ratio=4.0), head_tokens=HeadTokens()),
    depth=12,
    dim=192,
    num_classes=100,
    img_size=32,
    pos_embed="none",
)
