"""Conformer-Ti + SoT's head (SoT Table 5b, "Conformer-Ti + ours": 30.6 M parameters, 6.3 G FLOPs). The released
SoT code has no Conformer; vspec's construction, from the paper's text ("+ours" is the head; Table 1 varies only
the head): SoT's head in place of the transformer branch's class-token classifier, sum fusion with the class
token, FC(z0) + FC(svPN(MGCrP(Z))) over the 14 x 14 word tokens after trans_norm; the CNN branch's classifier
stays, and eval sums both branches' logits as released. MGCrP size: 6 heads of 34 x 34, the square 6-head size
that fits 30.6 M best (30,618,410 params; SoT-Small's 24 x 24 gives 27.1 M, 36 x 36 31.5 M)."""

import attrs

from vspec.spec import ConformerHead, MGCrP, SecondOrderHead, SvPN, load_spec

SPEC = attrs.evolve(
    load_spec(__file__.replace("conformer_ti_sot.py", "conformer_ti.py")),
    head=ConformerHead(tokens=SecondOrderHead(fusion="sum", pool=MGCrP(heads=6, m=34, n=34), norm=SvPN(alpha=0.5))),
)
