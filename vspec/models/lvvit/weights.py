"""LV-ViT's published ImageNet-1k weights as data (torch-free), for the presets' `WEIGHTS`: each file of the
release (github.com/zihangJiang/TokenLabeling/releases) with the arguments its factory passes to the released
constructor, its README's top-1, and the evaluation preprocessing of the release's validate.py / eval.sh."""

from ...spec.weights import IMAGENET_MEAN, IMAGENET_STD, Preprocess, PublishedWeights, Url

__all__ = ["FACTORIES", "released"]

_RELEASES = "https://github.com/zihangJiang/TokenLabeling/releases/download/"

# the arguments each released factory (tlt/models/lvvit.py) passes to LV_ViT; the resolution is the img_size that
# validate.py / main.py pass (--img-size), the only argument a 384 / 448 / 512 model adds
_COMMON = {"patch_size": 16, "mlp_ratio": 3.0, "return_dense": True, "mix_token": True}
FACTORIES = {
    "lvvit_t": {**_COMMON, "embed_dim": 240, "depth": 12, "num_heads": 4, "p_emb": "4_2", "skip_lam": 1.0},
    "lvvit_s": {**_COMMON, "embed_dim": 384, "depth": 16, "num_heads": 6, "p_emb": "4_2", "skip_lam": 2.0},
    "lvvit_m": {**_COMMON, "embed_dim": 512, "depth": 20, "num_heads": 8, "p_emb": "4_2", "skip_lam": 2.0},
    "lvvit_l": {**_COMMON, "embed_dim": 768, "depth": 24, "num_heads": 12, "p_emb": "4_2_128", "skip_lam": 3.0,
                "order": ["tr"] * 24},
}
# default_cfg's crop_pct (validate.py runs with --no-test-pool, so it is the one used)
_CROP_PCT = {"lvvit_t": 0.9, "lvvit_s": 0.9, "lvvit_m": 1.0, "lvvit_l": 1.0}


def released(factory: str, file: str, params: int, top1: float, img_size: int = 224) -> PublishedWeights:
    """The PublishedWeights entry of one release file of `factory`.

    Args:
        factory: the official factory's name (a FACTORIES key, e.g. "lvvit_s").
        file: the file's path under the release URL.
        params: the weights' parameter count.
        top1: the ImageNet-1k top-1 the README gives (%).
        img_size: the image size the weights were trained at.
    """
    return PublishedWeights(
        source=Url(_RELEASES + file), converter="lvvit", params=params, licence="Apache-2.0",
        score=f"ImageNet-1k top-1 {top1} (TokenLabeling README)",
        config={**FACTORIES[factory], "img_size": img_size},
        unwrap=("state_dict",),  # validate.py's load_checkpoint: the `state_dict` entry (EMA only with --use-ema)
        preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=_CROP_PCT[factory], interpolation="bicubic",
                              input_size=(3, img_size, img_size)),
        notes="trained with MixToken and token labeling (mix_token=True: MixToken in the training forward; the eval "
              "output, class logits + 0.5 x the max over patch tokens of the dense head's, is the released one)")
