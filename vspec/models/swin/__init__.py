"""Swin (Liu et al., "Swin Transformer: hierarchical vision transformer using shifted windows"): (shifted) window
attention with a relative position bias, and patch merging between stages. MSF's window attention builds on it.

One folder: `spec.py` (its kinds, torch-free), `modules.py` (a module per kind), `ops.py` (the window index
arithmetic) and `family.py` (its table entries); timm's weights convert with `vspec.convert.from_timm`.
"""
