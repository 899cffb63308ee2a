"""ViT-B/16 = timm vit_base_patch16_224: 12 x 768, 12 heads, 224 px, 1000 classes."""

from vspec.spec import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    INCEPTION_MEAN,
    INCEPTION_STD,
    MHSA,
    Block,
    Hub,
    Model,
    PatchEmbed,
    Preprocess,
    PublishedWeights,
)

SPEC = Model(embedder=PatchEmbed(patch_size=16), block=Block(attention=MHSA(heads=12)), depth=12, dim=768)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "augreg2_in21k_ft_in1k": PublishedWeights(
        source=Hub("timm/vit_base_patch16_224.augreg2_in21k_ft_in1k", "model.safetensors"), converter="timm",
        preprocess=Preprocess(INCEPTION_MEAN, INCEPTION_STD, crop_pct=0.9),
        params=86_567_656, licence="Apache-2.0", score="ImageNet-1k top-1 85.1 (timm's evaluation)",
        notes="ImageNet-21k pretraining, ImageNet-1k fine-tuning (timm's default tag); inputs normalised with mean = "
              "std = 0.5"),
    "deit_fb_in1k": PublishedWeights(
        source=Hub("timm/deit_base_patch16_224.fb_in1k", "model.safetensors"), converter="timm",
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9),
        params=86_567_656, licence="Apache-2.0",
        score="ImageNet-1k top-1 81.8 (DeiT-B, DeiT Table 1)",
        notes="DeiT-B: the same architecture trained on ImageNet-1k only"),
}
