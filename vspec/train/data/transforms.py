"""The image transforms of a run: PIL image -> normalised tensor (C, H, W), timm's training augmentation
(`create_transform`) or torchvision's resize and centre crop; with `on_device`, the uint8 tensor that the device
normalises (vspec/train/data/pipelines.py).

    build_transforms(img_size, in_chans, train=...)   PIL image -> normalised tensor (C, H, W)
    image_size(img_size)                              an int or (height, width) -> (height, width), checked
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from PIL import Image

from ...extras import needs

with needs("vspec's training and evaluation (vspec.train)"):
    from torchvision import transforms

from ...spec.weights import CROP_PCT, INTERPOLATIONS
from .preprocess import INTERPOLATION, mean_std
from .registry import DataError

__all__ = ["ConvertMode", "build_transforms", "image_size", "patch_posterize"]


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


def patch_posterize(steps) -> None:
    """timm's RandAugment ('rand-...-inc1': PosterizeIncreasing with magnitude noise) and 'v0' policies can ask
    PIL to keep 0 bits (timm 1.0.31: a magnitude drawn >= 10 gives 4 - int(10 / 10 * 4) = 0); Pillow >= 13 raises
    ValueError for that, which would stop a training run at a random step (rand-m9-mstd0.5-inc1: ~1 image in 700).
    Point those ops of the transforms `steps` (timm's Compose's list) at `_posterize` (same result as older
    Pillow). vspec's training transforms and benchmarks/loader.py's timm loader are patched so.

    Args:
        steps: the transforms' list, patched in place."""
    for t in steps:
        ops = list(getattr(t, "ops", None) or [])
        for sub in getattr(t, "policy", None) or []:
            ops.extend(sub)
        for op in ops:
            if "Posterize" in getattr(op, "name", ""):
                op.aug_fn = _posterize


def image_size(img_size, what: str = "img_size") -> tuple[int, int]:
    """An image size as (height, width): an int is square; one DataError line for anything else or a side < 1.

    Args:
        img_size: an int or a pair of ints.
        what: the name the error line begins with."""
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

    Args:
        img_size: the output's size, an int or (height, width).
        in_chans: the output's channels (1: greyscale, 3: RGB); the image is converted to that mode first.
        train: the training transform, else the evaluation one.
        auto_augment: timm's auto-augment policy, or None.
        re_prob: random erasing's probability (training), in [0, 1].
        crop_ratio: the evaluation crop's ratio (timm's crop_pct), in CROP_PCT's range (vspec/spec/weights.py).
        mean: the normalisation's per-channel mean (None: ImageNet's for 3 channels, else 0.5: `mean_std`).
        std: its per-channel std (as `mean`).
        random_resized_crop: train with timm's augmentations even without auto_augment or random erasing.
        on_device: stop at the uint8 tensor (normalisation and erasing on the device).
        interpolation: every resize's filter (bicubic, bilinear or nearest; published weights name theirs).
    """
    size = image_size(img_size)
    _check_options(in_chans, crop_ratio, re_prob, interpolation)
    mean, std = mean_std(in_chans, mean, std)
    convert = ConvertMode(_MODES[in_chans])
    if train and (random_resized_crop or auto_augment or re_prob > 0):
        return transforms.Compose([convert, *_timm_training(size, in_chans, auto_augment, re_prob, interpolation, mean,
                                                            std, on_device)])
    to_tensor = [transforms.PILToTensor()] if on_device else [transforms.ToTensor(), transforms.Normalize(mean, std)]
    return transforms.Compose([convert, *_resize(size, train, crop_ratio, interpolation), *to_tensor])


def _check_options(in_chans: int, crop_ratio: float, re_prob: float, interpolation: str) -> None:
    """One DataError line for a channel count, crop ratio, erasing probability or filter out of range."""
    if in_chans not in _MODES:
        raise DataError(f"in_chans: expected one of {sorted(_MODES)}, got {in_chans!r}")
    low, high = CROP_PCT
    if not (isinstance(crop_ratio, (int, float)) and low <= crop_ratio <= high):  # NaN too
        raise DataError(f"crop_ratio: must be in [{low:g}, {high:g}], got {crop_ratio!r}")
    if not 0.0 <= re_prob <= 1.0:
        raise DataError(f"re_prob: must be in [0, 1], got {re_prob!r}")
    if interpolation not in INTERPOLATIONS:
        raise DataError(f"interpolation: expected one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}")


def _timm_training(size, in_chans, auto_augment, re_prob, interpolation, mean, std, on_device) -> list:
    """timm's `create_transform(is_training=True)` steps (posterize patched), one DataError line for a policy it
    cannot build."""
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
    patch_posterize(tf.transforms)
    return tf.transforms


def _resize(size: tuple[int, int], train: bool, crop_ratio: float, interpolation: str) -> list:
    """The deterministic resize steps: Resize(size) in training or at crop_ratio 1, else the scaled resize and the
    centre crop."""
    interp = transforms.InterpolationMode(interpolation)
    if train or crop_ratio == 1:
        return [transforms.Resize(size, interpolation=interp)]
    scaled = tuple(max(1, round(s / crop_ratio)) for s in size)
    if size[0] == size[1]:
        resize = [transforms.Resize(scaled[0], interpolation=interp)]
    else:
        from timm.data.transforms import ResizeKeepRatio  # extra

        resize = [ResizeKeepRatio(scaled, longest=0.0, interpolation=interpolation)]
    resize.append(transforms.CenterCrop(size))  # pads with zeros where the resized image is smaller
    return resize

