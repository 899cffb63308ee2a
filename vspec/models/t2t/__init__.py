"""T2T-ViT (Yuan et al., "Tokens-to-token ViT"): the tokens-to-token embedder (soft splits, performer or transformer
token blocks).

One folder: `spec.py` (its kinds, torch-free), `modules.py` (a module per kind), `ops.py` (its functions),
`convert.py` (the released code's weights) and `family.py` (its table entries).
"""

__all__ = []
