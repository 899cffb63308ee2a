"""DeiT-T + SoT (SoT Table 5a, "DeiT-T + ours": 7.0 M parameters, 2.3 G FLOPs in the paper's
conv + linear convention): the DeiT-Tiny body of specs/deit_tiny.py with SoT's DenseNet token
embedding and SoT's head (sum fusion, MGCrP 6 heads 14 x 14, approximate svPN). vspec measures
7.06 M and 2.35 G (tests/models/sot/test_sot.py). Either part alone is one change on any preset:
`--set head.kind=second_order` or `--set embedder.kind=sot_conv`."""

import attrs

from vspec.spec import MGCrP, SecondOrderHead, SoTEmbed, SvPN, load_spec

SPEC = attrs.evolve(
    load_spec(__file__.replace("deit_tiny_sot.py", "deit_tiny.py")),
    embedder=SoTEmbed(block="dense"),
    head=SecondOrderHead(fusion="sum", pool=MGCrP(heads=6, m=14, n=14), norm=SvPN(alpha=0.5)),
)
