"""LV-ViT-L at 448 px (the released `lvvit_l` with img_size 448, as validate.py's --img-size makes it): `lvvit_l.py`
with a position table of 1 + (448 / 16)^2 tokens. 150,473,552 parameters."""

from pathlib import Path

from vspec.models.lvvit.weights import released
from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("lvvit_l.py")), {"img_size": 448})

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {"released": released("lvvit_l", "1.0/lvvit_l-150M-448-86.2.pth.tar", params=150_473_552, top1=86.2,
                                img_size=448)}
