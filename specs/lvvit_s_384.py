"""LV-ViT-S at 384 px (the released `lvvit_s` with img_size 384, as validate.py's --img-size makes it): `lvvit_s.py`
with a position table of 1 + (384 / 16)^2 tokens. 26,297,744 parameters."""

from pathlib import Path

from vspec.models.lvvit.weights import released
from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("lvvit_s.py")), {"img_size": 384})

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {"released": released("lvvit_s", "1.0/lvvit_s-26M-384-84.4.pth.tar", params=26_297_744, top1=84.4,
                                img_size=384)}
