"""`vspec compare`'s SoT: compare_vit.py with SoT's second-order head (SoT Eq. 1-3): the class token summed with
the word tokens' MGCrP pooling (4 heads of 8 x 8 covariances) under approximate svPN."""

from pathlib import Path

from vspec.spec import MGCrP, SecondOrderHead, SvPN, load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("compare_vit.py")), {
    "head": SecondOrderHead(fusion="sum", pool=MGCrP(heads=4, m=8, n=8), norm=SvPN()),
})
