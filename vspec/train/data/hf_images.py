"""--data hf for an image model: a Hugging Face dataset's training split and its validation split (vspec/train/data/
hf.py finds them) as the image sets' items: (transform(PIL image), label), the images decoded by the reader of
ImageFolder's files (`decode_image`), or with `Request.encoded` the images' encoded bytes, decoded on the device as
JPEG files are. The labels are checked once, up front (from the label column alone, no image read); an image that
does not decode is one line naming its split and row when it is read."""

from __future__ import annotations

import io

import numpy as np
import torch
from torch.utils.data import Dataset

from ...extras import needs
from .hf import image_columns, open_splits, split_files
from .registry import DataError, Request
from .sources import decode_image, read_bytes, read_image

__all__ = ["HFImages", "hf_images", "val_split"]

_VAL_SPLITS = ("validation", "test")  # the split validated on where --val-split is not given: the first there


class HFImages(Dataset):
    """One split's images and labels: item i is (transform(its image), label), or with `encoded` (its bytes as a
    uint8 tensor, label). `labels` is checked (`_check_labels`); `name` begins an unreadable image's line."""

    def __init__(self, split, image_column: str, labels: np.ndarray, name: str, transform=None, encoded=False):
        from datasets import Image  # extra

        # the bytes as stored (decode=False): decoded here, as ImageFolder's files are, or on the device
        self.split = split.select_columns([image_column]).cast_column(image_column, Image(decode=False))
        self.column, self.targets, self.name = image_column, labels, name
        self.transform, self.encoded = transform, encoded

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int):
        value = self.split[int(i)][self.column] or {}
        data, path, where = value.get("bytes"), value.get("path"), f"{self.name} row {i}"
        if data is None and not path:
            raise DataError(f"{where}: holds no image (no bytes, no path)")
        label = int(self.targets[i])
        if self.encoded:
            return (read_bytes(path) if data is None else torch.frombuffer(bytearray(data), dtype=torch.uint8)), label
        image = read_image(path) if data is None else decode_image(io.BytesIO(data), where)
        return (self.transform(image) if self.transform else image), label


def _check_labels(split, column: str, num_classes: int | None, name: str) -> np.ndarray:
    """A split's labels as int64, each in [0, num_classes) (None: any >= 0), read from the label column alone;
    else one line naming the first bad row: missing (null), negative (ClassLabel's -1: no label), out of range."""
    values = split.with_format("arrow")[column]
    if values.null_count:
        row = next(i for i, v in enumerate(values.is_null().to_pylist()) if v)
        raise DataError(f"{name} row {row}: no label (null in column {column!r})")
    labels = values.to_numpy(zero_copy_only=False).astype(np.int64)
    if not len(labels):
        raise DataError(f"{name}: the split has no rows")
    bad = np.flatnonzero((labels < 0) | (labels >= (num_classes or np.iinfo(np.int64).max)))
    if len(bad):
        label = int(labels[bad[0]])
        why = ("negative (ClassLabel's -1 is 'no label': an unlabelled split)" if label < 0 else
               f"out of range: the classes are 0 to {num_classes - 1}")
        raise DataError(f"{name} row {int(bad[0])}: label {label} is {why}")
    return labels


def val_split(request: Request, splits: list[str]) -> str:
    """The split validated on: --val-split, else the first of _VAL_SPLITS there; one line naming the splits
    there are otherwise.

    Args:
        request: the run's data request (its `split`: --val-split).
        splits: the dataset's splits."""
    chosen = request.split or next((s for s in _VAL_SPLITS if s in splits), None)
    if chosen in splits and chosen != "train":
        return chosen
    given = f"--val-split {request.split}: not a split to validate on" if request.split else "no validation split"
    raise DataError(f"hf: {request.data_dir}: {given} (its splits: {', '.join(splits)}; a run trains on train and "
                    "validates on another: --val-split NAME)")


def hf_images(request: Request):
    """(train, val, num_classes) of the Hugging Face dataset at `request.data_dir` (vspec/train/data/hf.py): the
    train split and the validation split (`val_split`), their image and label columns found from the features
    (`image_columns`), the classes a ClassLabel's names, else 0 to the training split's largest label. With
    `request.streaming`, the files read as streams instead (vspec/train/data/hf_stream.py).

    Args:
        request: the run's data request (data_dir, the columns, the split, streaming, the transforms)."""
    with needs("--data hf"):
        import datasets  # extra  # noqa: F401
    where = request.data_dir
    files = split_files(where, request.subset)
    splits = list(files)
    if "train" not in splits:
        raise DataError(f"hf: {where}: no train split (its splits: {', '.join(splits)})")
    val_name = val_split(request, splits)
    if request.streaming:
        from .hf_stream import streams  # extra: pyarrow, datasets'

        return streams(request, files["train"], files[val_name], val_name)
    opened = open_splits(where, request.subset, ["train", val_name])
    train, val = opened["train"], opened[val_name]
    image, label, names = image_columns(train.features, request.image_column, request.label_column)
    if val.features != train.features:
        image_columns(val.features, image, label)  # the same columns there, of the right types
        if names is not None and list(getattr(val.features[label], "names", [])) != names:
            raise DataError(f"hf: {where}: the {val_name} split's classes are not the train split's "
                            f"(its {label} feature's names differ)")
    train_labels = _check_labels(train, label, len(names) if names else None, f"hf: {where}: train")
    num_classes = len(names) if names else int(train_labels.max()) + 1
    val_labels = _check_labels(val, label, num_classes, f"hf: {where}: {val_name}")
    common = dict(image_column=image, encoded=request.encoded)
    return (HFImages(train, labels=train_labels, name=f"hf: {where}: train",
                     transform=None if request.encoded else request.train_transform, **common),
            HFImages(val, labels=val_labels, name=f"hf: {where}: {val_name}",
                     transform=None if request.encoded else request.eval_transform, **common),
            num_classes)
