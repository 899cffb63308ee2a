"""T2T-ViT-24 (`t2t_vit_24`): specs/t2t_vit_14.py at 24 x 512, 8 heads, MLP 3x. 64,000,974 trainable
parameters, 64,105,934 with the frozen `w` and table (the released count)."""

from vspec.spec import IMAGENET_MEAN, IMAGENET_STD, Preprocess, PublishedWeights, Url, load_spec, override

SPEC = override(load_spec(__file__.replace("t2t_vit_24.py", "t2t_vit_14.py")),
                {"depth": 24, "dim": 512, "block.attention.heads": 8, "block.ffn.ratio": 3.0})

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "ema": PublishedWeights(
        source=Url("https://github.com/yitu-opensource/T2T-ViT/releases/download/main/82.3_T2T_ViT_24.pth.tar"),
        converter="t2t", params=64_000_974, licence="Clear BSD", score="ImageNet-1k top-1 82.3 (T2T-ViT README)",
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9),
        config={"tokens_type": "performer", "embed_dim": 512, "depth": 24, "num_heads": 8, "mlp_ratio": 3.0},
        unwrap=("state_dict_ema", "state_dict"),
        notes="trained and evaluated with qk_scale None (head_dim^-0.5) by the release's main.py; its factories' "
              "pretrained=True path (qk_scale = embed_dim^-0.5) loads no file"),
}
