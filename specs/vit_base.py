"""ViT-B/16 = timm vit_base_patch16_224: 12 x 768, 12 heads, 224 px, 1000 classes."""

from vspec.spec import MHSA, Block, Model, PatchEmbed

SPEC = Model(embedder=PatchEmbed(patch_size=16), block=Block(attention=MHSA(heads=12)), depth=12, dim=768)
