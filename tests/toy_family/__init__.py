"""A family that lives outside vspec (tests/models/test_new_family.py): ReZero-style gated blocks (Bachlechner et al.,
"ReZero is all you need": x + g f(x), g a learnable scalar starting at 0) with a gated-linear-unit FFN (Shazeer,
"GLU variants improve transformer": (x W) * silu(x V) then W2). Its folder is a family's layout: `spec.py`,
`modules.py`, `convert.py`, `family.py`, `presets/`, and what its "paper" trains with and plots (`paper.py`,
`analysis.py`)."""
