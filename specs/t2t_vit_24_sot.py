"""T2T-ViT-24 + SoT's head (SoT Table 5c, "T2T-ViT-24+ours": 72.1 M, 15.5 G): specs/t2t_vit_24.py with
SoT's head (sum fusion, MGCrP 6 heads 36 x 36, approximate svPN): 72,104,154 parameters counted as the released
T2T code counts (its frozen `w` and table included), Table 5c's 72.1 M. README, "SoT's head on T2T-ViT"."""

import attrs

from vspec.spec import MGCrP, SecondOrderHead, SvPN, load_spec

SPEC = attrs.evolve(
    load_spec(__file__.replace("t2t_vit_24_sot.py", "t2t_vit_24.py")),
    head=SecondOrderHead(fusion="sum", pool=MGCrP(heads=6, m=36, n=36), norm=SvPN(alpha=0.5)),
)
