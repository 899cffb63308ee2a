"""DHVT-S for CIFAR-100 at patch size 2: width 384, 8 heads."""

from pathlib import Path

from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("dhvt_tiny_cifar_p4.py")),
                {"dim": 384, "block.attention.heads": 8, "embedder.patch_size": 2})
