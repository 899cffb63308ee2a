"""A tiny gated transformer: 16 px grey images, patch 4, 2 gated blocks of width 32, the GLU FFN."""

from vspec.spec import GLUFFN, MHSA, GatedBlock, Model, PatchEmbed

SPEC = Model(embedder=PatchEmbed(patch_size=4), block=GatedBlock(attention=MHSA(heads=2), ffn=GLUFFN(), gate_init=0.1),
             depth=2, dim=32, num_classes=10, img_size=16, in_chans=1)
