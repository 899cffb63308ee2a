"""Swin-T (Liu et al. 2021) = timm `swin_tiny_patch4_window7_224`: 4 x 4 patches + LayerNorm, four
stages of (2, 2, 6, 2) blocks at widths 96 x (1, 2, 4, 8) with (3, 6, 12, 24) heads, window attention (window
7, shifted in every second block of a stage, relative position bias), patch merging into stages 2-4,
final LayerNorm, average-pooling head; no class token, no position embedding. LayerNorm eps 1e-5.
drop_path 0.2 is the Swin paper's training value (timm's constructor default is 0.1)."""

from vspec.spec import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Block,
    GAPHead,
    Hub,
    Model,
    Norm,
    PatchEmbed,
    PatchMerging,
    Preprocess,
    PublishedWeights,
    Stage,
    WindowMHSA,
)

LN = Norm(eps=1e-5)

SPEC = Model(
    embedder=PatchEmbed(patch_size=4, norm=LN),
    stages=[Stage(depth=depth, dim=96 * 2**i, block=Block(attention=WindowMHSA(heads=heads, window=7), norm=LN),
                  entry=PatchMerging(norm=LN) if i else None)
            for i, (depth, heads) in enumerate(zip((2, 2, 6, 2), (3, 6, 12, 24)))],
    class_token=False,
    pos_embed="none",
    head=GAPHead(),
    drop_path=0.2,
)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "ms_in1k": PublishedWeights(source=Hub("timm/swin_tiny_patch4_window7_224.ms_in1k", "model.safetensors"),
                                converter="timm", params=28_288_354, licence="MIT",
                                preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9),
                                score="ImageNet-1k top-1 81.2 (Swin, Table 1a)"),
}
