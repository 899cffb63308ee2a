"""`vspec compare`'s ViT (README, "Comparing specs"): DeiT's structure at MNIST size: 32 x 32 grey images
(mnist5k's 28 x 28 digits resized) cut into 8 x 8 patches (a 4 x 4 grid), a class token and learned position
embedding, 3 blocks of width 64 with 4 heads and MLP ratio 2, 10 classes. The other compare_* specs change one
family's parts of it."""

from vspec.spec import MHSA, MLP, Block, Model, PatchEmbed

SPEC = Model(
    embedder=PatchEmbed(patch_size=8),
    block=Block(attention=MHSA(heads=4), ffn=MLP(ratio=2.0)),
    depth=3,
    dim=64,
    num_classes=10,
    img_size=32,
    in_chans=1,
)
