"""T2T-ViT-14 (yitu-opensource/T2T-ViT `t2t_vit_14`): the tokens-to-token module (performer token blocks,
token_dim 64) then 14 x 384, 6 heads, MLP 3x, no qkv bias, LayerNorm eps 1e-5, the fixed sinusoid table; 224 px.
21,465,806 trainable parameters; 21,545,550 with the random features `w` and the table the released model stores
as frozen parameters (tests/models/t2t/test_t2t.py)."""

from vspec.spec import (
                                              IMAGENET_MEAN,
                                              IMAGENET_STD,
                                              MHSA,
                                              MLP,
                                              Block,
                                              Model,
                                              Norm,
                                              Preprocess,
                                              PublishedWeights,
                                              T2TEmbed,
                                              Url,
)

SPEC = Model(embedder=T2TEmbed(), block=Block(attention=MHSA(heads=6, qkv_bias=False), ffn=MLP(ratio=3.0),
                                              norm=Norm(eps=1e-5)),
             depth=14, dim=384, pos_embed="sincos1d")

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "ema": PublishedWeights(
        source=Url("https://github.com/yitu-opensource/T2T-ViT/releases/download/main/81.5_T2T_ViT_14.pth.tar"),
        converter="t2t", params=21_465_806, licence="Clear BSD", score="ImageNet-1k top-1 81.5 (T2T-ViT README)",
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9),
        config={"tokens_type": "performer", "embed_dim": 384, "depth": 14, "num_heads": 6, "mlp_ratio": 3.0},
        unwrap=("state_dict_ema", "state_dict"),
        notes="trained and evaluated with qk_scale None (head_dim^-0.5) by the release's main.py; its factories' "
              "pretrained=True path (qk_scale = embed_dim^-0.5) loads no file"),
}
