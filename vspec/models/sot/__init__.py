"""SoT (Xie et al., "SoT: delving deeper into classification head for transformer"): the convolutional token
embedding, the second-order head (MGCrP, svPN, ...), and the language head on text bodies.

One folder: `spec.py` (its kinds, torch-free), `modules.py` (a module per kind), `ops.py` (its functions),
`convert.py` (the released code's weights) and `family.py` (its table entries).
"""

__all__ = []
