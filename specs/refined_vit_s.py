"""Refined-ViT-S (Refiner Table 10; the released Refiner_ViT_S): 16 blocks x 384, 12 heads, 224 px, the
CNN patch stem, compute and shared blocks alternating, the shared blocks' DLA with expansion 3 (what the
released code runs: 6.82 G MACs; `refined_vit_s_expand6.py` honours the factory's 6, the paper's 7.2 G),
class-token head (`refined_vit_s_dense.py` adds the dense auxiliary head)."""

from vspec.models.refiner.spec import released_blocks
from vspec.spec import ConvStem, Model

SPEC = Model(embedder=ConvStem(patch_size=16), block=released_blocks([False, True] * 8, heads=12), dim=384)
