"""LV-ViT (Jiang et al., "All tokens matter: token labeling for training better vision transformers"): the
pre-norm block with a re-scaled residual branch, on the core's CNN patch stem and class-token head with the dense
auxiliary head.

One folder: `spec.py` (its kind, torch-free), `modules.py` (its module), `convert.py` (the released code's weights)
and `family.py` (its table entries).
"""

__all__ = []
