"""An image run's training and validation splits, built for its input way (vspec/train/data/pipelines.py):
the PIL transforms at the scale training sees, the files' bytes where the device decodes them, each training image
with its label map under --token-labels (vspec/train/token_labels/dataset.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import TEXT_OPTIONS
from ..token_labels.dataset import TokenLabels
from ..token_labels.maps import token_grid
from .preprocess import eval_crop_ratio
from .registry import DataError, entry, options
from .sources import build_datasets
from .transforms import build_transforms

__all__ = ["Splits", "image_splits"]


@dataclass(frozen=True)
class Splits:
    """A run's data as its task read it (`Task.read`, vspec/train/tasks/): the training and validation splits, the
    loader's collate function (None: torch's default), the data set's class count (the spec's num_classes follows
    it), and what the task keeps of the reading: an image run's input path (vspec/train/data/pipelines.py), a text
    run's task and its tokenizer's identity (sha256 by file)."""

    train: Any
    val: Any
    num_classes: int
    collate: Callable | None = None
    input_path: Any = None
    task: Any = None
    tokenizer: dict[str, str] | None = None


def image_splits(cfg, spec, recipe, way: str, inputs: dict):
    """(train, val, num_classes) of the run `cfg` (a TrainConfig), built for its input way (`input_way`,
    vspec/train/data/pipelines.py: "decoded": the files' bytes; "normalised" / "host": PIL transforms that leave
    uint8 images or normalise). `inputs`: the run's mean, std and interpolation.

    Args:
        cfg: the run's TrainConfig.
        spec: the spec trained.
        recipe: the run's Recipe.
        way: `input_way`'s answer.
        inputs: the run's inputs."""
    if "image" not in entry(cfg.data.name).modalities:  # the text options are DataConfig's to refuse
        raise ValueError(f"--data {cfg.data.name}: for a text body (the spec's embedder is {spec.embedder.kind})")
    text = next((f for f in TEXT_OPTIONS if getattr(cfg.data, f) is not None), None)
    if text:  # a set that serves both (--data hf): the spec's body chose images
        raise ValueError(f"--{text.replace('_', '-')}: for a text body (the spec's embedder is {spec.embedder.kind})")
    if cfg.data.token_labels is not None:
        return _token_label_splits(cfg, spec, recipe, way, inputs)
    if way == "decoded":  # the workers read the files; the device does the rest
        return build_datasets(cfg.data.name, img_size=spec.img_size, in_chans=spec.in_chans, train_transform=None,
                              eval_transform=None, data_dir=cfg.data.data_dir, download=cfg.data.download,
                              seed=cfg.run.seed, encoded=True, **options(cfg.data))
    return _datasets(cfg, spec, *_transforms(spec, recipe, way != "host", inputs))


def _transforms(spec, recipe, on_device: bool, inputs: dict):
    """(train, eval) transforms of PIL images, at the scale training sees."""
    given = {k: inputs[k] for k in ("mean", "std", "interpolation") if inputs.get(k) is not None}
    train_tf = build_transforms(spec.img_size, spec.in_chans, train=True, auto_augment=recipe.auto_augment,
                                re_prob=recipe.re_prob, random_resized_crop=recipe.random_resized_crop,
                                on_device=on_device, **given)
    # at the scale training sees (a 0.875 crop after a plain resize would enlarge every digit by 8 / 7)
    eval_tf = build_transforms(spec.img_size, spec.in_chans, train=False,
                               crop_ratio=eval_crop_ratio(recipe.random_resized_crop), on_device=on_device,
                               **given)
    return train_tf, eval_tf


def _datasets(cfg, spec, train_tf, eval_tf):
    return build_datasets(
        cfg.data.name, img_size=spec.img_size, in_chans=spec.in_chans, train_transform=train_tf,
        eval_transform=eval_tf, data_dir=cfg.data.data_dir, download=cfg.data.download,
        synthetic_size=cfg.data.synthetic_size, seed=cfg.run.seed,
        num_classes=spec.num_classes if cfg.data.name == "synthetic" else None, **options(cfg.data))


def _token_label_splits(cfg, spec, recipe, way: str, inputs: dict):
    """--token-labels: each training image with its label map, augmented together (TokenLabels); the validation
    split as without."""
    token_grid(spec)  # refuses a spec without the dense head first
    if cfg.run.decode_on == "device":
        raise DataError("--token-labels: the label maps are cropped and flipped on the host (--decode-on host)")
    train_tf, eval_tf = _transforms(spec, recipe, way != "host", inputs)
    train_ds, val_ds, num_classes = _datasets(cfg, spec, None, eval_tf)
    data = {"data": cfg.data.name, "data_dir": cfg.data.data_dir}  # what labels.json names
    train_ds = TokenLabels(train_ds, cfg.data.token_labels, train_tf, num_classes=num_classes, data=data)
    return train_ds, val_ds, num_classes
