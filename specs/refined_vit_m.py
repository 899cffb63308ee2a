"""Refined-ViT-M (Refiner Table 10; the released Refiner_ViT_M): 32 blocks x 420, 12 heads, otherwise as
`refined_vit_s.py` (the factory's head_expand 3 is unused there too)."""

from vspec.models.refiner.spec import released_blocks
from vspec.spec import ConvStem, Model

SPEC = Model(embedder=ConvStem(patch_size=16), block=released_blocks([False, True] * 16, heads=12), dim=420)
