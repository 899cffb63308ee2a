"""Conformer-Ti (Peng et al., ICCV 2021), the released `Conformer(patch_size=16, channel_ratio=1, embed_dim=384,
depth=12, num_heads=6, mlp_ratio=4, qkv_bias=True)`: 23,524,704 params, 224 px, 1000 classes.

Two branches: the stem's 56 x 56 x 64 map feeds a bottleneck (the CNN branch, 64 channels) and a 4 x 4 patch conv
(196 tokens + a class token of width 384, no position embedding). Block 1 is a plain ViT block; blocks 2-12
are coupled blocks with a CNN side (`conv`): bottlenecks of width 64 / 128 / 256 (stride 2 at the first block of
stages 2 and 3) coupled to the tokens at stride 4 / 2 / 1; the last fusion halves the map (7 x 7 x 256). The head
sums the map's classifier and the class token's (training: both, the mean of their losses)."""

from vspec.spec import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    MHSA,
    Block,
    ConformerHead,
    ConformerStem,
    ConvBranch,
    CoupledBlock,
    Manual,
    Model,
    Preprocess,
    PublishedWeights,
    Stage,
)

ATTENTION = MHSA(heads=6)


def coupled(width: int, down: int, stride: int = 1, fusion_stride: int = 1) -> CoupledBlock:
    return CoupledBlock(attention=ATTENTION, conv=ConvBranch(width=width, stride=stride, down=down,
                                                             fusion_stride=fusion_stride))


SPEC = Model(
    embedder=ConformerStem(patch_size=16, width=64),
    stages=[
        Stage(depth=4, dim=384, block=[Block(attention=ATTENTION)] + [coupled(64, 4)] * 3),
        Stage(depth=4, dim=384, block=[coupled(128, 2, stride=2)] + [coupled(128, 2)] * 3),
        Stage(depth=4, dim=384, block=[coupled(256, 1, stride=2)] + [coupled(256, 1)] * 2
              + [coupled(256, 1, fusion_stride=2)]),
    ],
    pos_embed="none", final_norm=False, head=ConformerHead(),
)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "released": PublishedWeights(
        source=Manual("https://drive.google.com/file/d/19SxGhKcWOR5oQSxNUWUM2MGYiaWMrF1z/view",
                      "Conformer_tiny_patch16.pth"),
        converter="conformer", params=23_524_704, licence="Apache-2.0", unwrap=("model",),
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.875),
        score="ImageNet-1k top-1 81.3 (Conformer README)",
        config={"patch_size": 16, "channel_ratio": 1, "embed_dim": 384, "depth": 12, "num_heads": 6, "mlp_ratio": 4,
                "qkv_bias": True},
        notes="on Google Drive (or Baidu pan.baidu.com/s/12AblBmhUu5gnYsPjnDE_Jg, code hzhm): a person downloads it"),
}
