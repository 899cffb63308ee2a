"""The DHVT paper's CIFAR-100 baseline (Table 5, first row): DeiT-T with 4 heads at patch size 4,
learned absolute position embedding, 32 x 32 inputs, 100 classes."""

from pathlib import Path

from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("deit_tiny.py")),
                {"embedder.patch_size": 4, "block.attention.heads": 4, "img_size": 32, "num_classes": 100})
