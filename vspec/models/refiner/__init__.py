"""Refiner (Zhou et al., "Refiner: refining self-attention for vision transformers"): refined attention with maps
handed from block to block, Refined-ViT's CNN stem and adjusted blocks.

One folder: `spec.py` (its kinds, torch-free), `modules.py` (a module per kind), `convert.py` (the released code's
weights) and `family.py` (its table entries).
"""

__all__ = []
