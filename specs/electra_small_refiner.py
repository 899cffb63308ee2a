"""ELECTRA-small + Refiner (Refiner Table 6, "BERT-small + Refiner", 14 M parameters): specs/electra_small.py with
refiner attention in every block, the paper's form (Fig. 3a): the 4 heads' maps expanded to 12 by a linear map over
heads, a 3 x 3 DLA on each L x L map, reduced back to 4; no map sharing between blocks (Table 6 has the baseline's
parameter count). On padded batches the maps are masked by m_i m_j before the DLA and by m_j after it, so a
padded sequence gets what it gets alone (the paper is silent on padding; the released DLA's BatchNorms would take
statistics over padding, so it is the paper form here)."""

import attrs

from vspec.spec import Refine, RefinerAttention, load_spec

BASE = load_spec(__file__.replace("electra_small_refiner.py", "electra_small.py"))

SPEC = attrs.evolve(BASE, block=attrs.evolve(BASE.block, attention=RefinerAttention(
    heads=4, attn_drop=0.1, proj_drop=0.1, refine=Refine(expansion=3, kernel=3))))
