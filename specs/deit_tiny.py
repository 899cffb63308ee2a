"""DeiT-Tiny = timm vit_tiny_patch16_224: ViT-Ti/16, 12 x 192, 3 heads, 224 px, 1000 classes."""

from vspec.spec import IMAGENET_MEAN, IMAGENET_STD, MHSA, Block, Hub, Model, PatchEmbed, Preprocess, PublishedWeights

SPEC = Model(embedder=PatchEmbed(patch_size=16), block=Block(attention=MHSA(heads=3)), depth=12, dim=192)

# the published weights (vspec.spec.weights): timm's copy of DeiT's release (facebookresearch/deit)
WEIGHTS = {
    "fb_in1k": PublishedWeights(
        source=Hub("timm/deit_tiny_patch16_224.fb_in1k", "model.safetensors"), converter="timm",
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9),
        params=5_717_416, licence="Apache-2.0", score="ImageNet-1k top-1 72.2 (DeiT, Table 1)"),
}
