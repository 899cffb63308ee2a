"""DHVT-T for CIFAR-100 at patch size 2 (one SOPE unit, 16 x 16 tokens)."""

from pathlib import Path

from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("dhvt_tiny_cifar_p4.py")),
                {"embedder.patch_size": 2})
