"""Refined-ViT-M with the dense auxiliary head (the released factories' default return_dense=True):
eval logits = class-token logits + 0.5 x the max over patch tokens of the auxiliary logits."""

from pathlib import Path

from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("refined_vit_m.py")), {"head.dense": {}})
