"""MSF (Kobayashi, "Mean-shift feature transformer"): mean-shift attention over all tokens and in Swin's windows.

One folder: `spec.py` (its kinds, torch-free), `modules.py` (a module per kind), `ops.py` (its functions),
`convert.py` (the released code's weights) and `family.py` (its table entries).
"""

__all__ = []
