"""Token labeling's training data (issue 46): every training image read with its label map, the two augmented
together in the release's order, and the label folder checked against the data set before training starts.

The conventions are the release's (github.com/zhoudaquan/Refiner_ViT @ b3e8cb0) as the fixtures' README
describes them ("Token labeling": "What the reader / transform returns",
"RandAugment label ops"). The image side is `build_transforms`' own timm pieces, only reordered: (1) horizontal
flip, (2) vertical flip, (3) RandAugment (its geometric ops also move the map) or colour jitter, (4) the random
resized crop, which does not crop the map but appends a third plane holding the crop, then to tensor / normalise
(or uint8 for the device) and random erasing as `build_transforms` gives them. Every draw comes from the global
python / numpy / torch streams, as timm's transform draws them: see `TokenLabels` for what a resume keeps.

    check_label_folder(label_root, keys, num_classes, data)  -> (k, Hm, Wm), or one DataError line naming the file
    TokenLabels(dataset, label_root, transform, num_classes=..., data=...)  items (image, label map (3, k, Hm, Wm))
    label_op(name, arg, label_map)                    RandAugment's geometric op on a (2, k, Hm, Wm) map
"""

from __future__ import annotations

import math
import os
import random
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from ...extras import needs

with needs("vspec's training and evaluation (vspec.train)"):
    from torchvision import transforms
    from torchvision.transforms.functional import hflip, resized_crop, vflip

from ..data.registry import DataError
from ..data.transforms import ConvertMode
from .maps import LABELS_JSON, data_place, image_keys, label_path, read_label_map, read_record

__all__ = ["LABEL_OPS", "LabelledRandAugment", "TokenLabels", "UNMOVED", "affine_label_map", "check_label_folder",
           "check_map", "crop_plane", "describe", "label_op"]

# ---------------------------------------------------------------------------- RandAugment label ops


def _rotate(deg: float, hm: int, wm: int) -> tuple[float, ...]:
    t = math.radians(deg)
    a, b = round(math.cos(t), 15), round(math.sin(t), 15)
    d, e = -b, a
    return a, b, hm / 2 - a * hm / 2 - b * wm / 2, d, e, wm / 2 - d * hm / 2 - e * wm / 2


# README "RandAugment label ops": (a, b, c, d, e, f), output (row, col) reads (a·row + b·col + c, d·row + e·col + f)
LABEL_OPS = {
    "ShearX": lambda f, hm, wm: (1, 0, 0, f, 1, 0),
    "ShearY": lambda f, hm, wm: (1, f, 0, 0, 1, 0),
    "TranslateXRel": lambda p, hm, wm: (1, 0, 0, 0, 1, p * wm),
    "TranslateYRel": lambda p, hm, wm: (1, 0, p * hm, 0, 1, 0),
    "Rotate": _rotate,
}
# timm ops that move pixels but have no label op: refused rather than leaving the map behind
UNMOVED = ("TranslateX", "TranslateY")


def affine_label_map(label_map: torch.Tensor, matrix) -> torch.Tensor:
    """Nearest-neighbour affine map of a (2, k, Hm, Wm) label map: output (row, col) copies the source point
    (p, q) rounded half up; scores are 0 where (p, q) lies outside [0, Hm − 1] x [0, Wm − 1] (before rounding),
    the class indices take the clamped position (edge replication). The k axis is untouched.

    Args:
        label_map: the map (2, k, Hm, Wm).
        matrix: (a, b, c, d, e, f): output (row, col) reads the source point (a row + b col + c, d row + e col + f)."""
    a, b, c, d, e, f = (float(v) for v in matrix)
    hm, wm = label_map.shape[-2:]
    row = torch.arange(hm, dtype=torch.float64)[:, None]
    col = torch.arange(wm, dtype=torch.float64)[None, :]
    p, q = a * row + b * col + c, d * row + e * col + f
    inside = (p >= 0) & (p <= hm - 1) & (q >= 0) & (q <= wm - 1)
    pr = torch.floor(p + 0.5).clamp(0, hm - 1).long()
    qr = torch.floor(q + 0.5).clamp(0, wm - 1).long()
    out = label_map[:, :, pr, qr]
    out[0] = out[0] * inside.to(out.dtype)
    return out


def label_op(name: str, arg: float, label_map: torch.Tensor) -> torch.Tensor:
    """RandAugment op `name` (timm's name, e.g. 'Rotate') with the image op's argument on a label map; ops that
    only change colours leave it as it is.

    Args:
        name: timm's op name.
        arg: the argument the image op was given.
        label_map: the map (2, k, Hm, Wm)."""
    if name not in LABEL_OPS:
        return label_map
    return affine_label_map(label_map, LABEL_OPS[name](arg, *label_map.shape[-2:]))


class LabelledRandAugment:
    """timm's RandAugment driven step by step so that each geometric step also moves the label map with the very
    (randomly negated) magnitude the image op drew. Draws as timm's RandAugment.__call__ and AugmentOp.__call__:
    numpy chooses the ops, then per op python's `random` for its probability, the magnitude noise, the sign and
    the interpolation."""

    def __init__(self, ra):
        self.ra = ra
        for op in ra.ops:
            if any(op.name.startswith(n) and not op.name.endswith("Rel") for n in UNMOVED):
                raise DataError(f"token labels: RandAugment's {op.name} has no label-map op (the release moves "
                                f"maps for {', '.join(LABEL_OPS)}); use another transform set")

    def __call__(self, img, label_map: torch.Tensor):
        ra = self.ra
        ops = np.random.choice(ra.ops, ra.num_layers, replace=ra.choice_weights is None, p=ra.choice_weights)
        for op in ops:
            if op.prob < 1.0 and random.random() > op.prob:
                continue
            magnitude = op.magnitude
            if op.magnitude_std == float("inf"):
                magnitude = random.uniform(0, magnitude)
            elif op.magnitude_std > 0:
                magnitude = random.gauss(magnitude, op.magnitude_std)
            magnitude = max(0.0, min(magnitude, op.magnitude_max or 10))  # timm's _LEVEL_DENOM
            args = op.level_fn(magnitude, op.hparams) if op.level_fn is not None else ()
            img = op.aug_fn(img, *args, **op.kwargs)
            if op.name in LABEL_OPS:
                label_map = label_op(op.name, args[0], label_map)
        return img, label_map


# ---------------------------------------------------------------------------- the transform, reordered


def _split(transform):
    """build_transforms' Compose -> (convert, hflip p, vflip p, augment steps, crop, tail); refuses a piece that
    would move pixels without the map."""
    from timm.data.auto_augment import RandAugment  # extra
    from timm.data.transforms import RandomResizedCropAndInterpolation  # extra


    parts = {"convert": [], "hflip": 0.0, "vflip": 0.0, "augment": [], "crop": None, "tail": []}
    photometric = (transforms.ColorJitter, transforms.RandomGrayscale, transforms.RandomApply)
    tail = ("MaybeToTensor", "MaybePILToTensor", "ToTensor", "PILToTensor", "Normalize", "RandomErasing")
    for t in getattr(transform, "transforms", [transform]):
        if isinstance(t, ConvertMode):
            parts["convert"].append(t)
        elif isinstance(t, transforms.RandomHorizontalFlip):
            parts["hflip"] = float(t.p)
        elif isinstance(t, transforms.RandomVerticalFlip):
            parts["vflip"] = float(t.p)
        elif isinstance(t, RandAugment):
            parts["augment"].append(LabelledRandAugment(t))
        elif isinstance(t, photometric):
            parts["augment"].append(t)
        elif isinstance(t, (RandomResizedCropAndInterpolation, transforms.Resize)) and parts["crop"] is None:
            parts["crop"] = t
        elif type(t).__name__ in tail:
            parts["tail"].append(t)
        else:
            raise DataError(f"token labels: the training transform's {type(t).__name__} would move the image "
                            f"without its label map (token labeling takes flips, RandAugment 'rand-...', colour "
                            f"jitter and the random resized crop)")
    return parts


def crop_plane(label_map: torch.Tensor, crop, image_hw, label: int) -> torch.Tensor:
    """(2, k, Hm, Wm) -> (3, k, Hm, Wm): step (4)'s plane, the crop's (top, left, height, width) as fractions of
    the (flipped, augmented) image at [2, 0, 0, 0:4] and the image's class at [2, 0, 0, 5], zeros elsewhere.

    Args:
        label_map: the map (2, k, Hm, Wm).
        crop: the crop's (top, left, height, width) in pixels of the image.
        image_hw: the image's (height, width).
        label: the image's class."""
    i, j, h, w = crop
    height, width = image_hw
    plane = torch.zeros((1, *label_map.shape[1:]), dtype=torch.float32)
    plane[0, 0, 0, :4] = torch.tensor([i / height, j / width, h / height, w / width])
    plane[0, 0, 0, 5] = float(label)
    return torch.cat([label_map.float(), plane])


class TokenLabels(Dataset):
    """A training data set whose items are (image, label map): the image as `transform` (build_transforms(...,
    train=True)) gives it, the pieces run in the release's order, and the image's (2, k, Hm, Wm) label map
    flipped / RandAugmented with it plus the crop plane: (3, k, Hm, Wm) float32. `dataset` must yield PIL images
    (built with train_transform=None); `keys` name its images (default `image_keys(dataset)`), each map read from
    `label_path(label_root, key)`. The folder is checked up front (`check_label_folder`) and each map when read.

    Randomness: the flips draw from torch's global generator (as torchvision's flips), RandAugment from numpy's
    and python's, the crop from python's (timm's get_params) — the streams timm's transform uses. A run's loader
    seeds them for each item from (seed, epoch, index) (vspec/train/data/loader.py, `Seeded`), in the main process
    or a worker alike, so a resume, mid-epoch included, gives the very items of the uninterrupted run."""

    def __init__(self, dataset, label_root, transform, *, num_classes: int, keys=None, decode_on: str = "host",
                 data: dict | None = None):
        if decode_on == "device":
            raise DataError("token labels: --decode-on device augments on the device, where label maps are not "
                            "moved yet; use --decode-on host")
        self.dataset, self.label_root, self.num_classes = dataset, Path(label_root), num_classes
        self.keys = list(image_keys(dataset) if keys is None else keys)
        if len(self.keys) != len(dataset):
            raise DataError(f"token labels: {len(self.keys)} names for {len(dataset)} images")
        self.shape = check_label_folder(self.label_root, self.keys, num_classes, data)
        self.parts = _split(transform)

    def __len__(self) -> int:
        return len(self.dataset)

    def read(self, i: int) -> torch.Tensor:
        """Image i's label map, checked against the folder's first (grid, k, classes).

        Args:
            i: the image's index in the data set."""
        path = label_path(self.label_root, self.keys[i])
        return check_map(read_label_map(path), path, self.num_classes, self.shape)

    def __getitem__(self, i: int):
        img, label = self.dataset[i]
        if not isinstance(img, Image.Image):
            raise DataError(f"token labels: the data set hands over a {type(img).__name__}, not a PIL image (build "
                            f"it with train_transform=None: the transform is TokenLabels')")
        return self.transform(img, self.read(i), label)

    def transform(self, img, label_map: torch.Tensor, label: int, *, flip: bool | None = None, crop=None):
        """(PIL image, its (2, k, Hm, Wm) map, class) -> (image, (3, k, Hm, Wm)). `flip` / `crop` (top, left,
        height, width pixels) replace the horizontal flip's / the crop's random draws when given.

        Args:
            img: the PIL image.
            label_map: its label map.
            label: its class.
            flip: whether to flip, or None (drawn).
            crop: the crop's box, or None (drawn)."""
        p = self.parts
        for t in p["convert"]:
            img = t(img)
        flipped = torch.rand(1) < p["hflip"] if flip is None and p["hflip"] > 0 else bool(flip)  # step (1)
        if flipped:
            img, label_map = hflip(img), label_map.flip(-1)
        if p["vflip"] > 0 and torch.rand(1) < p["vflip"]:  # step (2)
            img, label_map = vflip(img), label_map.flip(-2)
        for t in p["augment"]:  # step (3)
            img, label_map = t(img, label_map) if isinstance(t, LabelledRandAugment) else (t(img), label_map)
        image_hw = (img.size[1], img.size[0])
        img, crop = self._crop(img, crop)  # step (4)
        for t in p["tail"]:
            img = t(img)
        return img, crop_plane(label_map, crop, image_hw, label)

    def _crop(self, img, crop):
        t = self.parts["crop"]
        if t is None or not hasattr(t, "scale"):  # no random crop: the whole image (resized when asked)
            return (t(img) if t is not None else img), (0, 0, img.size[1], img.size[0])
        if crop is None:
            crop = t.get_params(img, t.scale, t.ratio)
        interpolation = random.choice(t.interpolation) if isinstance(t.interpolation, (tuple, list)) \
            else t.interpolation
        return resized_crop(img, *crop, t.size, interpolation), tuple(int(v) for v in crop)


# ---------------------------------------------------------------------------- the folder


def check_map(label_map: torch.Tensor, path, num_classes: int, shape=None) -> torch.Tensor:
    """One map against the data set: its (k, Hm, Wm) that of the folder's first map, its class indices integers
    in [0, num_classes), distinct at each location (what relabel_target needs: checked here, in the loader, so that
    the training step does not read the batch back to check it).

    Args:
        label_map: the map read.
        path: its file (named in the error line).
        num_classes: the data set's classes.
        shape: the (k, Hm, Wm) every map has, or None (the first map)."""
    if shape is not None and tuple(label_map.shape[1:]) != tuple(shape):
        raise DataError(f"{path}: a (2, {', '.join(map(str, label_map.shape[1:]))}) label map, but the folder's "
                        f"first is (2, {', '.join(map(str, shape))}): one k and grid for every image")
    idx = label_map[1]
    if not ((idx >= 0) & (idx < num_classes) & (idx == idx.round())).all():
        bad = idx[(idx < 0) | (idx >= num_classes) | (idx != idx.round())][0].item()
        raise DataError(f"{path}: class index {bad:g} is not one of the data set's {num_classes} classes "
                        f"(a label folder of another data set?)")
    if idx.shape[0] > 1 and (idx.sort(dim=0).values.diff(dim=0) == 0).any():
        raise DataError(f"{path}: a location repeats a class index (the top-k indices of a location must be "
                        f"distinct)")
    return label_map


def describe(data: dict) -> str:
    """A data set as labels.json records it: "imagefolder /data/pets (train: 3,680 images, 37 classes)".

    Args:
        data: labels.json's "data" record."""
    counts = [f"{data[k]:,} {k}" if isinstance(data.get(k), int) else None for k in ("images", "classes")]
    inner = ", ".join(filter(None, counts))
    split = f"{data['split']}: " if data.get("split") and inner else ""
    return " ".join(filter(None, (str(data.get("data") or "data set"), data.get("data_dir") and str(data["data_dir"]),
                                  inner and f"({split}{inner})")))


def _mismatch(record: dict | None, ours: dict) -> str:
    """What labels.json says beside a missing map: the data set it was made of where that is another folder
    or size, or that its labeling stopped short; "" where it says nothing more."""
    if record is None:
        return ""
    if any(k in record and record[k] != ours[k] for k in ("data_dir", "images")):
        return f"; its {LABELS_JSON} says the maps are of {describe(record)}, this run reads {describe(ours)}"
    count, images = record.get("count"), record.get("images")
    if isinstance(count, int) and isinstance(images, int) and count < images:
        return f"; its {LABELS_JSON} counts {count:,} of {images:,} maps written (run vspec label again to go on)"
    return ""


def check_label_folder(label_root, keys, num_classes: int, data: dict | None = None) -> tuple[int, int, int]:
    """Refuse, in one DataError line naming the file, a label folder that does not fit the data set: one whose
    labels.json (where there is one: `vspec label` writes it, the released folders have none) names another
    data set or class count than `data` ({"data": NAME, "data_dir": DIR}: the run's) and `num_classes`, a
    missing map (all checked up front, one directory listing per class folder; what labels.json says of it
    added), two images named to one map, a first map that is not readable or holds a class index outside
    [0, num_classes). Returns the first map's (k, Hm, Wm), which every map must share (checked as each is read).

    Args:
        label_root: the label folder.
        keys: the training images' names (`image_keys`).
        num_classes: the data set's classes.
        data: the run's data set, or None (labels.json's data not compared)."""
    root = Path(label_root)
    if not root.is_dir():
        raise DataError(f"{root}: no such label folder (token labeling reads one map per training image)")
    if not keys:
        raise DataError(f"{root}: token labels for a data set without images")
    record = read_record(root)
    ours = {"data": None, "data_dir": None, **(data or {}), "split": "train", "images": len(keys),
            "classes": num_classes}
    ours["data_dir"] = data_place(ours["data_dir"])
    compared = ("data", "classes") if data is not None else ("classes",)
    if record is not None and any(k in record and record[k] != ours[k] for k in compared):
        raise DataError(f"{root / LABELS_JSON}: the maps here are of {describe(record)}, not of this run's "
                        f"{describe(ours)}: label this data set (vspec label), or give its label folder")
    paths = [label_path(root, key) for key in keys]
    owner, by_dir = {}, defaultdict(set)
    for key, path in zip(keys, paths):
        if path in owner:
            raise DataError(f"{path}: the label map of both {owner[path]} and {key} (names are cut at the first dot)")
        owner[path] = key
    for parent in {p.parent for p in paths}:
        try:
            with os.scandir(parent) as it:
                by_dir[parent] = {e.name for e in it}
        except (FileNotFoundError, NotADirectoryError):
            pass  # no such class folder: every map of it is missing (by_dir's empty set)
    missing = [p for p in paths if p.name not in by_dir[p.parent]]
    if missing:
        raise DataError(f"{missing[0]}: no label map for {owner[missing[0]]} ({len(missing)} of {len(paths)} "
                        f"images have none){_mismatch(record, ours)}")
    first = check_map(read_label_map(paths[0]), paths[0], num_classes)
    return tuple(first.shape[1:])
