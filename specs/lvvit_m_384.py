"""LV-ViT-M at 384 px (the released `lvvit_m` with img_size 384, as validate.py's --img-size makes it): `lvvit_m.py`
with a position table of 1 + (384 / 16)^2 tokens. 56,025,104 parameters."""

from pathlib import Path

from vspec.models.lvvit.weights import released
from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("lvvit_m.py")), {"img_size": 384})

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {"released": released("lvvit_m", "1.0/lvvit_m-56M-384-85.4.pth.tar", params=56_025_104, top1=85.4,
                                img_size=384)}
