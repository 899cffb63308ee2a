"""iRPE (Wu et al., "Rethinking and improving relative position encoding for vision transformer"): attention with
contextual product relative position encodings.

One folder: `spec.py` (its kinds, torch-free), `modules.py` (a module per kind), `ops.py` (its functions),
`convert.py` (the released code's weights) and `family.py` (its table entries).
"""

__all__ = []
