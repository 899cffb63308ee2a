"""`vspec compare`'s ViT with the dense auxiliary head (Refined-ViT's and LV-ViT's `aux_head`): compare_vit.py whose
class-token head also classifies each of the 4 x 4 patch tokens, the head token labeling trains (docs/families/
refiner.md, "Token labeling on mnist5k")."""

from pathlib import Path

from vspec.spec import ClassTokenHead, DenseAux, load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("compare_vit.py")), {"head": ClassTokenHead(dense=DenseAux())})
