"""--data shards in the tests: a small image folder of noise JPEGs (made here, nothing downloaded), packed, and
read back."""

from pathlib import Path

import numpy as np
from PIL import Image

from vspec.train.data.pack import pack
from vspec.train.data.sources import build_datasets
from vspec.train.data.transforms import build_transforms

CLASSES = ("ant", "bee", "cat")


def image_folder(root: Path, per_class: int = 16, size: int = 12) -> Path:
    """root/train/<class>/ with `per_class` JPEGs of each class, root/val/<class>/ a quarter as many."""
    rng = np.random.default_rng(0)
    for split, n in (("train", per_class), ("val", max(per_class // 4, 1))):
        for name in CLASSES:
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i:03d}.jpg", quality=90)
    return root


def packed(tmp_path: Path, per_class: int = 16, shard_size: int = 6) -> Path:
    """The pack of a fresh image folder: 3 x per_class training images, shards of `shard_size`."""
    out = tmp_path / "shards"
    pack(image_folder(tmp_path / "images", per_class), out, shard_size=shard_size)
    return out


def streams(data_dir, encoded=True, seed=5):
    """(train stream, val stream, classes) of --data shards at `data_dir`, 8 px images."""
    tf = build_transforms(8, 3, train=False)
    return build_datasets("shards", img_size=8, in_chans=3, train_transform=tf, eval_transform=tf,
                          data_dir=str(data_dir), encoded=encoded, seed=seed)
