"""DeiT-Small = timm vit_small_patch16_224: ViT-S/16, 12 x 384, 6 heads, 224 px, 1000 classes."""

from vspec.spec import MHSA, Block, Model, PatchEmbed

SPEC = Model(embedder=PatchEmbed(patch_size=16), block=Block(attention=MHSA(heads=6)), depth=12, dim=384)
