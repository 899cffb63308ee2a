"""Swin-B + SoT's head (SoT Table 5c, "Swin-B + ours": 95.9 M parameters, 16.9 G FLOPs): MGCrP in place of
Swin's GAP (SoT Sec. 4.3) as in specs/swin_tiny_sot.py, with SoT-Base's head (6 heads of 38 x 38,
approximate svPN) over the 7 x 7 x 1024 word tokens of the last stage."""

import attrs

from vspec.spec import MGCrP, SecondOrderHead, SvPN, load_spec

SPEC = attrs.evolve(
    load_spec(__file__.replace("swin_base_sot.py", "swin_base.py")),
    head=SecondOrderHead(fusion="aggr_all", pool=MGCrP(heads=6, m=38, n=38), norm=SvPN(alpha=0.5)),
)
