"""Swin-S (Liu et al. 2021) = timm `swin_small_patch4_window7_224`: Swin-T (specs/swin_tiny.py) with 18
blocks in its third stage; drop_path 0.3, the Swin paper's training value."""

from pathlib import Path

from vspec.spec import IMAGENET_MEAN, IMAGENET_STD, Hub, Preprocess, PublishedWeights, load_spec, override

SPEC = override(load_spec(Path(__file__).with_name("swin_tiny.py")), {"stages.2.depth": 18, "drop_path": 0.3})

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "ms_in1k": PublishedWeights(
        source=Hub("timm/swin_small_patch4_window7_224.ms_in1k", "model.safetensors"),
        converter="timm", params=49_606_258, licence="MIT",
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9),
        score="ImageNet-1k top-1 83.2 (Swin, Table 1a)"),
    "ms_in22k_ft_in1k": PublishedWeights(
        source=Hub("timm/swin_small_patch4_window7_224.ms_in22k_ft_in1k",
                   "model.safetensors"), converter="timm", params=49_606_258,
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9),
        licence="MIT", score=None,
        notes="ImageNet-22k pretraining, ImageNet-1k fine-tuning (timm's default tag)"),
}
