"""Refined-ViT-S with the dense auxiliary head and MixToken (the released factories' defaults return_dense=True,
mix_token=True; as LV-ViT's presets): eval logits = class-token logits + 0.5 x the max over patch tokens of the
auxiliary logits; MixToken acts only in the training forward that asks for the head's outputs (vspec train's)."""

from pathlib import Path

from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("refined_vit_s.py")), {"head.dense": {"mix_token": True}})
