"""What the DHVT paper trains with, torch-free (read by `vspec train --recipe`): `RECIPES`, its CIFAR-100 recipe."""

from ...spec.paper import Recipe

__all__ = ["RECIPES"]

RECIPES = {
    # DHVT on CIFAR-100: 32 px, batch 512 (T), lr 1e-3, wd 0.05, warmup 5, 300 epochs, DeiT augmentations
    "dhvt_cifar": Recipe(batch_size=512, ema_decay=None),
}
