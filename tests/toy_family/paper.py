"""What the toy family's "paper" trains with and plots, torch-free, found by `vspec train --recipe` and `vspec analyze`
as the family is (vspec.spec.families.paper_tables): `RECIPES`, a short recipe of its own; `ANALYSES`, its figure
(tests/toy_family/analysis.py, imported when it runs)."""

from vspec.spec.paper import Analysis, Recipe

RECIPES = {
    # ReZero's gates start small: a higher lr than `none`, no augmentation, two epochs
    "toy_rezero": Recipe(epochs=2, batch_size=16, lr=3e-3, warmup_epochs=0, auto_augment=None, re_prob=0.0,
                         random_resized_crop=False, mixup=0.0, cutmix=0.0, smoothing=0.0, drop_path=0.0,
                         ema_decay=None),
}

ANALYSES = {
    "gates": Analysis("tests.toy_family.analysis:gates_figure", "gates", batch_size=None,
                      help="the two ReZero gates (attention, FFN) of each gated block, by depth."),
}
