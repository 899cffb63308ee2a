"""BERT-base + SoT for MNLI (3 labels) (SoT Table 6; supplement Table S-4, Table 6's per-task setting):
specs/bert_base.py with SoT's language head in place of its classifier: one MGCrP head, q 112 x k 48 (1x1
projections, each + BatchNorm + ReLU, as released), svPN, dropout 0.7, summed with the [CLS] token's classifier (no
pooler). Padding is masked: the real tokens are pooled, so dynamic padding changes nothing (the released head pooled
all 128 padded positions: `language_head(..., padding="included")`)."""

import attrs

from vspec.spec import language_head, load_spec

SPEC = attrs.evolve(load_spec(__file__.replace("bert_base_sot_mnli.py", "bert_base.py")),
                    head=language_head(112, 48, drop=0.7), num_classes=3)
