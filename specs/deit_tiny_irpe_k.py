"""iRPE-K-T (SoT Table 5a's body; iRPE's released `deit_tiny_patch16_224_ctx_product_50_shared_k`): the DeiT-Tiny
body of specs/deit_tiny.py with contextual product iRPE on keys in every block (50 buckets: 7 x 7 plus the class
token's, one table shared by the heads; alpha 1.9, beta 3.8, gamma 15.2)."""

import attrs

from vspec.spec import IMAGENET_MEAN, IMAGENET_STD, Block, IRPEAttention, Preprocess, PublishedWeights, Url, load_spec

SPEC = attrs.evolve(
    load_spec(__file__.replace("deit_tiny_irpe_k.py", "deit_tiny.py")),
    block=Block(attention=IRPEAttention(heads=3, on="k")),
)

# the published weights (vspec.spec.weights; `vspec weights` lists them)
WEIGHTS = {
    "released": PublishedWeights(
        source=Url("https://github.com/wkcn/iRPE-model-zoo/releases/download/1.0/"
                   "deit_tiny_patch16_224_ctx_product_50_shared_k.pth"),
        converter="irpe", params=5_755_816, licence="Apache-2.0", unwrap=("model",),
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.875),
        score="ImageNet-1k top-1 73.7 (iRPE README, iRPE-K on DeiT-Ti)",
        config={"patch_size": 16, "embed_dim": 192, "depth": 12, "num_heads": 3, "mlp_ratio": 4, "qkv_bias": True,
                "norm_layer": "LayerNorm(eps=1e-6)",
                "rpe_config": {"rpe_q": None, "rpe_v": None,
                               "rpe_k": {"shared_head": True, "mode": "contextual", "method": 3, "alpha": 1.9,
                                         "beta": 3.8, "gamma": 15.2, "num_buckets": 50}}}),
}
