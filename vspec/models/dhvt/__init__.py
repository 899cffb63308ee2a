"""DHVT (Lu et al., "Bridging the gap between vision transformers and convolutional neural networks on small
datasets"): SOPE, DAFF and the head-token block.

One folder: `spec.py` (its kinds, torch-free), `modules.py` (a module per kind), `convert.py` (the released code's
weights) and `family.py` (its table entries).
"""

__all__ = []
