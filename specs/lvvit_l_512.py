"""LV-ViT-L at 512 px (the released `lvvit_l` with img_size 512, as validate.py's --img-size makes it): `lvvit_l.py`
with a position table of 1 + (512 / 16)^2 tokens. 150,657,872 parameters."""

from pathlib import Path

from vspec.models.lvvit.weights import released
from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("lvvit_l.py")), {"img_size": 512})

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {"released": released("lvvit_l", "1.0/lvvit_l-150M-512-86.4.pth.tar", params=150_657_872, top1=86.4,
                                img_size=512)}
