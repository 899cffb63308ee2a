"""Named training recipes (docs/training.md, Recipes: what each paper trained with). Flags of tools/train.py
override any field.

`lr` is the peak learning rate at `batch_size`; another global batch size scales it linearly
(DeiT's rule), unless --lr is given.
"""

from dataclasses import dataclass, fields, replace

MAX_EPOCHS = 100_000  # --epochs and --warmup-epochs at most (a typo of many digits would train until killed)


@dataclass(frozen=True)
class Recipe:
    epochs: int = 300
    batch_size: int = 1024
    lr: float = 1e-3
    weight_decay: float = 0.05
    warmup_epochs: int = 5
    warmup_lr: float = 1e-6
    min_lr: float = 1e-5
    auto_augment: str | None = "rand-m9-mstd0.5-inc1"
    re_prob: float = 0.25
    random_resized_crop: bool = True
    mixup: float = 0.8
    cutmix: float = 1.0
    smoothing: float = 0.1
    drop_path: float = 0.1
    ema_decay: float | None = 0.99996
    clip_grad: float | None = None
    schedule: str = "cosine"  # cosine | linear (decay to min_lr after the warmup)
    warmup_frac: float = 0.0  # warmup as a share of all steps, in place of warmup_epochs when > 0


RECIPES: dict[str, Recipe] = {
    # the ImageNet DeiT recipe used by SoT, Refiner and DHVT-ImageNet (SoT: lr 1e-3, wd 0.03 at batch 1024)
    "deit": Recipe(),
    # DHVT on CIFAR-100: 32 px, batch 512 (T), lr 1e-3, wd 0.05, warmup 5, 300 epochs, DeiT augmentations
    "dhvt_cifar": Recipe(batch_size=512, ema_decay=None),
    # MSF on ImageNet: 100 epochs, batch 1024, lr 1e-3, wd 0.05, warmup 10, smoothing 0.1, mixup / cutmix 0.2
    "msf": Recipe(epochs=100, warmup_epochs=10, auto_augment=None, re_prob=0.0, mixup=0.2, cutmix=0.2,
                  drop_path=0.0, ema_decay=None),
    # plain AdamW + cosine, no augmentation or regularisation: small data, smoke tests, the demo
    "none": Recipe(epochs=30, batch_size=64, warmup_epochs=2, auto_augment=None, re_prob=0.0,
                   random_resized_crop=False, mixup=0.0, cutmix=0.0, smoothing=0.0, drop_path=0.0, ema_decay=None),
    # `none` cut to 4 epochs at 4x the lr, warmup 1: `vspec compare`'s default (four small specs x 3 seeds on mnist5k
    # within minutes on a CPU; in 4 epochs the plain ViT underfits at lower rates)
    "compare": Recipe(epochs=4, batch_size=64, lr=4e-3, warmup_epochs=1, auto_augment=None, re_prob=0.0,
                      random_resized_crop=False, mixup=0.0, cutmix=0.0, smoothing=0.0, drop_path=0.0, ema_decay=None),
    # fine-tuning a language body (BERT's GLUE recipe, SoT supplement Table S-4): AdamW lr 2e-5, batch 32, linear
    # warmup over 10 % of the steps then linear decay to 0, 3 epochs, no augmentation or regularisation
    "glue": Recipe(epochs=3, batch_size=32, lr=2e-5, weight_decay=0.01, warmup_epochs=0, warmup_lr=0.0, min_lr=0.0,
                   auto_augment=None, re_prob=0.0, random_resized_crop=False, mixup=0.0, cutmix=0.0, smoothing=0.0,
                   drop_path=0.0, ema_decay=None, schedule="linear", warmup_frac=0.1),
}

FIELDS = tuple(f.name for f in fields(Recipe))


def resolve(name: str, **overrides) -> Recipe:
    """The named recipe with the given (non-None) fields replaced; the lr is scaled to the batch size
    when only the batch size changes."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(RECIPES)}")
    base = RECIPES[name]
    given = {k: v for k, v in overrides.items() if v is not None}
    if "batch_size" in given and "lr" not in given:
        given["lr"] = base.lr * given["batch_size"] / base.batch_size
    return replace(base, **given)
