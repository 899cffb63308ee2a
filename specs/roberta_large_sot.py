"""RoBERTa-large + SoT (SoT Table 6; supplement Table S-4, representation size 4K, one of Table S-4's options):
specs/roberta_large.py with SoT's language head in place of its classifier: one MGCrP head, q 64 x k 64 (1x1
projections, each + BatchNorm + ReLU, as released), svPN, dropout 0.5, summed with the <s> token's classifier (no
dense layer). Padding is masked: the real tokens are pooled, so dynamic padding changes nothing (the released head
pooled all 128 padded positions: `language_head(..., padding="included")`)."""

import attrs

from vspec.spec import language_head, load_spec

SPEC = attrs.evolve(load_spec(__file__.replace("roberta_large_sot.py", "roberta_large.py")),
                    head=language_head(64, 64, drop=0.5))
