"""`vspec compare`'s Refiner: compare_vit.py with refiner attention (Refiner Sec. 3) in every block: the 4 heads'
maps expanded to 12 (attention expansion 3), refined by 3 x 3 distributed local attention, reduced back."""

from pathlib import Path

from vspec.spec import Refine, RefinerAttention, load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("compare_vit.py")), {
    "block.attention": RefinerAttention(heads=4, refine=Refine()),
})
