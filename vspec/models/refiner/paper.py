"""What the Refiner paper trains with and plots, torch-free (read by `vspec train --recipe` and `vspec analyze`):
`RECIPES`, Table 8's two columns; `ANALYSES`, its figures (vspec/models/refiner/analysis.py, imported when one
runs)."""

from ...spec.paper import Analysis, Recipe

__all__ = ["ANALYSES", "RECIPES"]

RECIPES = {
    # Refiner's Table 8, standard column (its ablations): batch 256, lr 5e-3 x batch / 256, mixup 0.2, no cutmix;
    # smoothing and EMA are not in the table: timm's smoothing 0.1, EMA off (the released main.py's default)
    "refiner": Recipe(batch_size=256, lr=5e-3, mixup=0.2, cutmix=0.0, ema_decay=None),
    # Table 8, advanced column (Table 7's results, LV-ViT's recipe): batch 512, lr 5e-3 x batch / 512, stochastic depth
    # 0.1 x #blocks / 12, mixup 0.8, cutmix 1.0; MixToken and token labels (--token-labels DIR) as released (cos_reg is
    # the released yamls' only: --cos-reg-component 12)
    "refiner_advanced": Recipe(batch_size=512, lr=5e-3, mixup=0.8, cutmix=1.0, ema_decay=None, drop_path_by_depth=True,
                               mix_token=True),
}

ANALYSES = {
    "cka": Analysis("vspec.models.refiner.analysis:cka_figure", "cka", batch_size=32, help=(
        "Refiner's feature evolution (appendix Eq. 2, Fig. 2): F_k = CKA(f_k, f_out) / CKA(f_1, f_out), linear CKA "
        "between the tokens after block k (each stage of a multi-stage model) and the final features, every token of "
        "the batch one example, averaged over --batches.")),
    "maps": Analysis("vspec.models.refiner.analysis:maps_figure", "maps", batch_size=None, per_block=True, help=(
        "the attention maps of one image (the first drawn) in --blocks and --heads, N x N over all tokens (class "
        "token first), before and after refinement where a block refines its maps (Fig. 1, Fig. 5); the JSON keeps "
        "each map's mean row entropy; window attention is refused.")),
}
