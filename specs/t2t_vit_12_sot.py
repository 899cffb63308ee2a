"""T2T-ViT-12 + SoT's head (SoT Table 5a, "T2T-ViT-12+ours": 6.9 M, 2.3 G): specs/t2t_vit_12.py with
SoT-Tiny's head (sum fusion of the class token and MGCrP 6 heads 14 x 14, approximate svPN), as on DeiT-T. Table
5a's 6.9 M is the bare T2T-ViT-12's count, which no MGCrP head fits (README, "SoT's head on T2T-ViT")."""

import attrs

from vspec.spec import MGCrP, SecondOrderHead, SvPN, load_spec

SPEC = attrs.evolve(
    load_spec(__file__.replace("t2t_vit_12_sot.py", "t2t_vit_12.py")),
    head=SecondOrderHead(fusion="sum", pool=MGCrP(heads=6, m=14, n=14), norm=SvPN(alpha=0.5)),
)
