"""A small spec for 32 x 32 inputs, trained by `make demo` on scikit-learn's digits: DHVT's parts
(SOPE at patch 4, head tokens, DAFF) on a 4-block, 96-wide body, 10 classes."""

from pathlib import Path

from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("dhvt_tiny_cifar_p4.py")),
                {"depth": 4, "dim": 96, "block.attention.heads": 4, "num_classes": 10})
