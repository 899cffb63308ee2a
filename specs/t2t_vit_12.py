"""T2T-ViT-12 (`t2t_vit_12`): specs/t2t_vit_14.py at 12 x 256, 4 heads, MLP 2x. 6,887,374 trainable
parameters, 6,941,902 with the frozen `w` and table (the released count)."""

from vspec.spec import IMAGENET_MEAN, IMAGENET_STD, Preprocess, PublishedWeights, Url, load_spec, override

SPEC = override(load_spec(__file__.replace("t2t_vit_12.py", "t2t_vit_14.py")),
                {"depth": 12, "dim": 256, "block.attention.heads": 4, "block.ffn.ratio": 2.0})

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "ema": PublishedWeights(
        source=Url("https://github.com/yitu-opensource/T2T-ViT/releases/download/main/76.5_T2T_ViT_12.pth.tar"),
        converter="t2t", params=6_887_374, licence="Clear BSD", score="ImageNet-1k top-1 76.5 (T2T-ViT README)",
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9),
        config={"tokens_type": "performer", "embed_dim": 256, "depth": 12, "num_heads": 4, "mlp_ratio": 2.0},
        unwrap=("state_dict_ema", "state_dict"),
        notes="trained and evaluated with qk_scale None (head_dim^-0.5) by the release's main.py; its factories' "
              "pretrained=True path (qk_scale = embed_dim^-0.5) loads no file"),
}
