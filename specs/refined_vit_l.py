"""Refined-ViT-L (Refiner Table 10; the released Refiner_ViT_L): 32 blocks x 512, 16 heads, otherwise as
`refined_vit_s.py`."""

from vspec.models.refiner.spec import released_blocks
from vspec.spec import ConvStem, Model

SPEC = Model(embedder=ConvStem(patch_size=16), block=released_blocks([False, True] * 16, heads=16), dim=512)
