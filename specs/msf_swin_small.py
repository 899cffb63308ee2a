"""Swin-S (specs/swin_small.py) with mean-shift window attention (Eq. 12, QKVPW untied):
MSF Table 6's Swin-S row, 53.36/18.88 M weight-matrix params / G FLOPs. The released MSF code has no Swin:
this is vspec's construction (WindowMeanShiftAttention: Swin's windows, shift and relative position bias,
added to the Gaussian scores; Swin's qkv / proj biases kept)."""

from vspec.spec import load_spec, override

SPEC = override(load_spec(__file__.replace("msf_swin_small.py", "swin_small.py")),
                {f"stages.{i}.block.attention.kind": "window_mean_shift" for i in range(4)})
