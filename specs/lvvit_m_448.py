"""LV-ViT-M at 448 px (the released `lvvit_m` with img_size 448, as validate.py's --img-size makes it): `lvvit_m.py`
with a position table of 1 + (448 / 16)^2 tokens. 56,131,600 parameters."""

from pathlib import Path

from vspec.models.lvvit.weights import released
from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("lvvit_m.py")), {"img_size": 448})

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {"released": released("lvvit_m", "1.0/lvvit_m-56M-448-85.5.pth.tar", params=56_131_600, top1=85.5,
                                img_size=448)}
