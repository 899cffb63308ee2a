"""T2T-ViT_t-24 (`t2t_vit_t_24`): specs/t2t_vit_24.py with transformer token blocks in place of the performer
ones."""

from vspec.spec import IMAGENET_MEAN, IMAGENET_STD, Preprocess, PublishedWeights, Url, load_spec, override

SPEC = override(load_spec(__file__.replace("t2t_vit_t_24.py", "t2t_vit_24.py")), {"embedder.block": "transformer"})

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "ema": PublishedWeights(
        source=Url("https://github.com/yitu-opensource/T2T-ViT/releases/download/main/82.6_T2T_ViTt_24.pth.tar"),
        converter="t2t", params=64_000_590, licence="Clear BSD", score="ImageNet-1k top-1 82.6 (T2T-ViT README)",
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9),
        config={"tokens_type": "transformer", "embed_dim": 512, "depth": 24, "num_heads": 8, "mlp_ratio": 3.0},
        unwrap=("state_dict_ema", "state_dict"),
        notes="trained and evaluated with qk_scale None (head_dim^-0.5) by the release's main.py; its factories' "
              "pretrained=True path (qk_scale = embed_dim^-0.5) loads no file"),
}
