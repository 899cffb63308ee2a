"""DHVT-S for ImageNet-1K: 224 px, patch 16, width 384, 6 heads."""

from pathlib import Path

from vspec.spec import load_spec, override

SPEC = override(
    load_spec(Path(__file__).with_name("dhvt_tiny_cifar_p4.py")),
    {"img_size": 224, "embedder.patch_size": 16, "num_classes": 1000, "dim": 384, "block.attention.heads": 6},
)
