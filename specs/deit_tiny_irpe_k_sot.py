"""iRPE-K-T + SoT (SoT Table 5a, "iRPE-K-T + ours": 7.0 M parameters, 2.3 G FLOPs in the paper's conv + linear
convention). The SoT release has no iRPE model; this is specs/deit_tiny_sot.py (SoT's DenseNet token embedding,
SoT's head: sum fusion, MGCrP 6 heads 14 x 14, approximate svPN) on the iRPE-K body of
specs/deit_tiny_irpe_k.py. README's iRPE section gives the measured figures (tests/models/irpe/test_irpe.py)."""

import attrs

from vspec.spec import MGCrP, SecondOrderHead, SoTEmbed, SvPN, load_spec

SPEC = attrs.evolve(
    load_spec(__file__.replace("deit_tiny_irpe_k_sot.py", "deit_tiny_irpe_k.py")),
    embedder=SoTEmbed(block="dense"),
    head=SecondOrderHead(fusion="sum", pool=MGCrP(heads=6, m=14, n=14), norm=SvPN(alpha=0.5)),
)
