"""DeiT-Tiny = timm vit_tiny_patch16_224: ViT-Ti/16, 12 x 192, 3 heads, 224 px, 1000 classes."""

from vspec.spec import MHSA, Block, Model, PatchEmbed

SPEC = Model(embedder=PatchEmbed(patch_size=16), block=Block(attention=MHSA(heads=3)), depth=12, dim=192)
