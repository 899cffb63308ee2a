"""Conformer (Peng et al., ICCV 2021): a CNN branch beside the transformer, coupled at every block: the stem, the
coupled block and its CNN side, the two-classifier head.

One folder: `spec.py` (its kinds, torch-free), `modules.py` (a module per kind), `convert.py` (the released code's
weights) and `family.py` (its table entries).
"""

__all__ = []
