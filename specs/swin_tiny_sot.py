"""Swin-T + SoT's head (SoT Table 5b, "Swin-T + ours": 31.6 M parameters, 6.0 G FLOPs): Swin has no class
token, "so we use our MGCrP in place of the original GAP" (SoT Sec. 4.3). vspec's construction: the
aggr_all fusion on a class-token-free body, FC(svPN(MGCrP(Z))) over the last stage's 7 x 7 word tokens,
with SoT-Small's head (6 heads of 24 x 24, approximate svPN). The released code has no Swin model;
`--set head.fusion=sum --set head.z0=mean_token` keeps a first-order branch on the mean token as well."""

import attrs

from vspec.spec import MGCrP, SecondOrderHead, SvPN, load_spec

SPEC = attrs.evolve(
    load_spec(__file__.replace("swin_tiny_sot.py", "swin_tiny.py")),
    head=SecondOrderHead(fusion="aggr_all", pool=MGCrP(heads=6, m=24, n=24), norm=SvPN(alpha=0.5)),
)
