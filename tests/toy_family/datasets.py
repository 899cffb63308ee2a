"""The toy family's data set, found by vspec's data-set table (vspec/train/data/registry.py) as the family is:
"stripes", horizontal or vertical bars of random phase and width on grey images, the class being the direction.
Torch-free here; the loader imports vspec's training parts when the set is read."""

from vspec.train import DataSet

DATASETS = (DataSet("stripes", "image", "tests.toy_family.datasets:stripes", "the toy family's bars, 2 classes",
                    metrics=("top1",)),)


def _bars(n: int, size: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    grid = np.arange(size)
    images = np.empty((n, size, size), dtype=np.uint8)
    for i, label in enumerate(labels):
        width, phase = rng.integers(1, 4), rng.integers(0, 8)
        bars = (((grid + phase) // width) % 2 * 255).astype(np.uint8)
        images[i] = bars[None, :] if label else bars[:, None]  # vertical bars vary along the width
    return images, labels


def stripes(request):
    """128 training and 32 validation images at the model's size, the same for every seed."""
    from vspec.train.data.sources import ArrayImages

    size = request.img_size[0]
    train, val = _bars(128, size, 0), _bars(32, size, 1)
    return ArrayImages(*train, request.train_transform), ArrayImages(*val, request.eval_transform), 2
