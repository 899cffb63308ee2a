"""Swin-B (Liu et al. 2021) = timm `swin_base_patch4_window7_224`: Swin-S (specs/swin_small.py) at widths
128 x (1, 2, 4, 8) with (4, 8, 16, 32) heads; drop_path 0.5, the Swin paper's training value."""

from pathlib import Path

from vspec.spec import IMAGENET_MEAN, IMAGENET_STD, Hub, Preprocess, PublishedWeights, load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("swin_small.py")),
                {**{f"stages.{i}.dim": 128 * 2**i for i in range(4)},
                 **{f"stages.{i}.block.attention.heads": 4 * 2**i for i in range(4)}, "drop_path": 0.5})

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "ms_in1k": PublishedWeights(
        source=Hub("timm/swin_base_patch4_window7_224.ms_in1k", "model.safetensors"),
        converter="timm", params=87_768_224, licence="MIT",
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9),
        score="ImageNet-1k top-1 83.5 (Swin, Table 1a)"),
    "ms_in22k_ft_in1k": PublishedWeights(
        source=Hub("timm/swin_base_patch4_window7_224.ms_in22k_ft_in1k",
                   "model.safetensors"), converter="timm", params=87_768_224,
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9),
        licence="MIT", score="ImageNet-1k top-1 85.2 (Swin, Table 1b)",
        notes="ImageNet-22k pretraining, ImageNet-1k fine-tuning (timm's default tag)"),
}
