"""iRPE-K-T (SoT Table 5a's body; iRPE's released `deit_tiny_patch16_224_ctx_product_50_shared_k`): the DeiT-Tiny
body of specs/deit_tiny.py with contextual product iRPE on keys in every block (50 buckets: 7 x 7 plus the class
token's, one table shared by the heads; alpha 1.9, beta 3.8, gamma 15.2)."""

import attrs

from vspec.spec import Block, IRPEAttention, load_spec

SPEC = attrs.evolve(
    load_spec(__file__.replace("deit_tiny_irpe_k.py", "deit_tiny.py")),
    block=Block(attention=IRPEAttention(heads=3, on="k")),
)
