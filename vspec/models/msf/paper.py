"""What the MSF paper trains with and plots, torch-free (read by `vspec train --recipe` and `vspec analyze`):
`RECIPES`, its ImageNet recipe; `ANALYSES`, its figures (vspec/models/msf/analysis.py, imported when one runs)."""

from ...spec.paper import Analysis, Recipe

__all__ = ["ANALYSES", "RECIPES"]

RECIPES = {
    # MSF on ImageNet: 100 epochs, batch 1024, lr 1e-3, wd 0.05, warmup 10, smoothing 0.1, mixup / cutmix 0.2
    "msf": Recipe(epochs=100, warmup_epochs=10, auto_augment=None, re_prob=0.0, mixup=0.2, cutmix=0.2,
                  drop_path=0.0, ema_decay=None),
}

ANALYSES = {
    "msf": Analysis("vspec.models.msf.analysis:msf_figure", "analysis", batch_size=8, help=(
        "(1) the subspace similarity (MSF Eq. 13: the mean cos^2 of the canonical angles, 0..1) of every pair of "
        "projection roles QUERY, KEY, VALUE, PROBE, WEIGHT, per layer and averaged over the heads, shown as its mean "
        "over the layers (Fig. 3); (2) the mean L2 norm of the token features after the embedding and after each "
        "layer (Fig. 4).")),
}
