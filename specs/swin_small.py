"""Swin-S (Liu et al. 2021) = timm `swin_small_patch4_window7_224`: Swin-T (specs/swin_tiny.py) with 18
blocks in its third stage; drop_path 0.3, the Swin paper's training value."""

from pathlib import Path

from vspec.spec import load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("swin_tiny.py")), {"stages.2.depth": 18, "drop_path": 0.3})
