"""Swin-B (Liu et al. 2021) = timm `swin_base_patch4_window7_224`: Swin-S (specs/swin_small.py) at widths
128 x (1, 2, 4, 8) with (4, 8, 16, 32) heads; drop_path 0.5, the Swin paper's training value."""

from pathlib import Path

from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("swin_small.py")),
                {**{f"stages.{i}.dim": 128 * 2**i for i in range(4)},
                 **{f"stages.{i}.block.attention.heads": 4 * 2**i for i in range(4)}, "drop_path": 0.5})
