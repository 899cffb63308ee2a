"""Refined-ViT-S with the expansion its factory asks for (head_expand = 6) honoured in every shared block's
DLA: the paper's 7.2 G MACs (Table 1's ratio 6). The released code passes 6 only to `apply_transform`
blocks, which no factory turns on, so `refined_vit_s.py` (expansion 3) is what its weights were trained as."""

from pathlib import Path

from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("refined_vit_s.py")),
                {f"block.{i}.attention.refine.expansion": 6 for i in range(1, 16, 2)})
