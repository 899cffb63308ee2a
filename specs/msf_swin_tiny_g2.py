"""Swin-T (specs/swin_tiny.py) with mean-shift window attention and 2-group interleaved projections
(QUERY, KEY, VALUE, PROBE grouped): MSF Table 6's Swin-T "w/ 2-group" row, 26.04/8.29 M weight-matrix params /
G FLOPs. The released MSF code has no Swin: this is vspec's construction (WindowMeanShiftAttention:
Swin's windows, shift and relative position bias, added to the Gaussian scores; Swin's qkv / proj
biases kept)."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("msf_swin_tiny_g2.py", "msf_swin_tiny.py")),
                {f"stages.{i}.block.attention.projections.groups": 2 for i in range(4)})
