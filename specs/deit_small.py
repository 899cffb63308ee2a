"""DeiT-Small = timm vit_small_patch16_224: ViT-S/16, 12 x 384, 6 heads, 224 px, 1000 classes."""

from vspec.spec import IMAGENET_MEAN, IMAGENET_STD, MHSA, Block, Hub, Model, PatchEmbed, Preprocess, PublishedWeights

SPEC = Model(embedder=PatchEmbed(patch_size=16), block=Block(attention=MHSA(heads=6)), depth=12, dim=384)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "fb_in1k": PublishedWeights(
        source=Hub("timm/deit_small_patch16_224.fb_in1k", "model.safetensors"), converter="timm",
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9),
        params=22_050_664, licence="Apache-2.0", score="ImageNet-1k top-1 79.8 (DeiT, Table 1)"),
}
