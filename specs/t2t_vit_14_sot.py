"""T2T-ViT-14 + SoT's head (SoT Table 5b, "T2T-ViT-14+ours": 24.4 M, 5.4 G): specs/t2t_vit_14.py with
SoT's head (sum fusion, MGCrP 6 heads 21 x 21: the size whose count is nearest Table 5b's; no 6-head size fits it
exactly), approximate svPN. README, "SoT's head on T2T-ViT"."""

import attrs

from vspec.spec import MGCrP, SecondOrderHead, SvPN, load_spec

SPEC = attrs.evolve(
    load_spec(__file__.replace("t2t_vit_14_sot.py", "t2t_vit_14.py")),
    head=SecondOrderHead(fusion="sum", pool=MGCrP(heads=6, m=21, n=21), norm=SvPN(alpha=0.5)),
)
