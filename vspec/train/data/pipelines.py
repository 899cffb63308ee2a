"""The image input path of a run, chosen once (`input_path`, for the splits built for its `input_way`) and held by the
image task (vspec/train/tasks/image.py): how the loader's batches become the model's input on the device.

    HostPath            normalised in the loader's workers (ToTensor + Normalize); the device only receives them
    NormalisedPath      uint8 images from the workers, normalised (and erased) on the device (`DeviceNormalise`,
                        timm's prefetcher): `--normalise-on device`, the default on CUDA
    DecodedPath         the JPEG files' bytes from the workers, decoded and augmented on the device by the training
                        process (`DevicePipeline`, the next batches prepared on a side stream on CUDA): `--decode-on
                        device`, `--decode-in main`
    WorkerDecodedPath   the same in the loader's worker processes (`WorkerPipeline`): `--decode-in workers`; the
                        validation batches as DecodedPath
Each satisfies `InputPath`: `prepare(images, train)` (a loader's batch ready on the device), `transfer(batch)` (a
training batch moved ahead by the prefetcher), `batches(loader, train, epoch, start)` (the loader's batches ready on
the device), and says what its loader hands over (`encoded`, `on_device`, `in_workers`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch
from torch.utils.data import IterableDataset

from .device_decode import DevicePipeline, Indexed, WorkerPipeline, collate_encoded, device_batches
from .loader import on_device, transfer
from .preprocess import INTERPOLATION, eval_crop_ratio, mean_std
from .registry import DataError

__all__ = ["AHEAD", "DecodedPath", "DeviceNormalise", "HostPath", "InputPath", "NormalisedPath",
           "WorkerDecodedPath", "input_path", "input_way"]

# who decodes the training batches under --decode-in auto: "main" (the training process, before the step; a thread
# of their own measured the same on an H200, docs/speed.md) or "workers" (the loader's processes, WorkerPipeline);
# a run asks for either with RunConfig.decode_in
AHEAD = "main"


@runtime_checkable
class InputPath(Protocol):
    """How an image run's loader batches become the model's input on the device (the image task's `path`, chosen
    once by `input_path`; the text task has the same three methods of its own, `vspec.train.tasks.Task`). Its
    declarations: `encoded`, the loader hands over the files' bytes (`collate_encoded`), not images; `on_device`,
    the images are normalised on the device, so the workers' transforms leave them uint8
    (`build_transforms(on_device=True)`); `in_workers`, the loader's workers make the training batches ready (their
    collate is `WorkerPipeline`, the data set `Indexed`)."""

    encoded: bool
    on_device: bool
    in_workers: bool

    def prepare(self, images: Any, train: bool) -> torch.Tensor:
        """A batch of the loader on the device, ready for the model.

        Args:
            images: the loader's inputs: images, uint8 images or the files' bytes, as the path declares.
            train: a training batch (augmented where the path augments) or a validation batch."""

    def transfer(self, batch: tuple[Any, torch.Tensor]) -> tuple[Any, torch.Tensor]:
        """A training batch of the loader moved to the device ahead of `batches` (`Prefetcher`, on CUDA).

        Args:
            batch: (inputs, target) as the loader yields it."""

    def batches(self, loader, train: bool, epoch: int = 0,
                start: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The loader's batches ready on the device, (images, target), in the loader's order.

        Args:
            loader: the batches, (inputs, target) each.
            train: training batches or validation batches.
            epoch: the epoch, which seeds a device pipeline's draws.
            start: the index of the loader's first batch in its epoch (a resumed run's; the draws of batch i are
                the same wherever the run was resumed)."""


class DeviceNormalise:
    """A batch of uint8 images (from `build_transforms(on_device=True)`) on the device, as float32 normalised
    by mean / std (the same (x / 255 - mean) / std as ToTensor + Normalize), channels-last where asked; in
    training, random erasing with probability `re_prob` there too (timm's RandomErasing in the mode the workers'
    transform uses, create_transform's default: constant zeros in the normalised image)."""

    def __init__(self, in_chans: int, device: torch.device, *, re_prob: float = 0.0, channels_last: bool = False,
                 mean=None, std=None):
        mean, std = mean_std(in_chans, mean, std)
        self.mean = torch.tensor(mean, device=device).view(1, -1, 1, 1) * 255
        self.std = torch.tensor(std, device=device).view(1, -1, 1, 1) * 255
        self.device, self.channels_last = device, channels_last
        self.erase = None
        if re_prob > 0:
            from timm.data.random_erasing import RandomErasing  # extra

            self.erase = RandomErasing(re_prob, mode="const", device=device)

    def __call__(self, images: torch.Tensor, train: bool) -> torch.Tensor:
        images = images.to(self.device, non_blocking=True)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        images = images.float().sub_(self.mean).div_(self.std)
        return self.erase(images) if train and self.erase is not None else images


class HostPath:
    """Batches the loader's workers made ready (normalised): moved to the device, channels-last where asked."""

    encoded = False  # the loader reads images (PIL), not the files' bytes
    on_device = False  # the workers' transforms normalise (`build_transforms(on_device=False)`)
    in_workers = False

    def __init__(self, device: torch.device, channels_last: bool = False):
        self.device, self.channels_last = device, channels_last

    def prepare(self, images: torch.Tensor, train: bool) -> torch.Tensor:
        """A batch of the loader on the device, ready for the model."""
        images = images.to(self.device, non_blocking=True)
        return images.contiguous(memory_format=torch.channels_last) if self.channels_last else images

    def transfer(self, batch):
        """A training batch of the loader moved to the device ahead of `batches` (`Prefetcher`, on CUDA)."""
        return transfer(batch, self.device)

    def batches(self, loader, train: bool, epoch: int = 0, start: int = 0):
        """The loader's batches (from batch `start` of `epoch`) ready on the device: (images, target)."""
        return on_device(loader, self.prepare, train, self.device)


class NormalisedPath(HostPath):
    """uint8 batches of the workers (`build_transforms(on_device=True)`), normalised on the device."""

    on_device = True

    def __init__(self, normalise: DeviceNormalise):
        super().__init__(normalise.device, normalise.channels_last)
        self.normalise = normalise

    def prepare(self, images: torch.Tensor, train: bool) -> torch.Tensor:
        """The uint8 batch normalised on the device (`DeviceNormalise`; random erasing in training)."""
        return self.normalise(images, train)


class DecodedPath:
    """The files' bytes of the loader (`collate_encoded`), decoded and augmented on the device by the training
    process (`DevicePipeline`)."""

    encoded = True
    on_device = True
    in_workers = False

    def __init__(self, pipeline_args: dict, device: torch.device, decode_in: str = "auto"):
        self.pipeline_args, self.device, self.decode_in = pipeline_args, device, decode_in
        self.pipeline = DevicePipeline(**pipeline_args, device=device)

    def prepare(self, images, train: bool) -> torch.Tensor:
        """The batch's bytes decoded (and, in training, augmented) on the device by the pipeline."""
        return self.pipeline(images, train)

    def transfer(self, batch):
        """Only the labels: the pipeline decodes the images from the host."""
        images, target = batch
        return images, target.to(self.device, non_blocking=True)

    def batches(self, loader, train: bool, epoch: int = 0, start: int = 0):
        """The loader's batches decoded on the device, (images, target), batch i's draws seeded by (`epoch`, i from
        `start`) (`device_batches`)."""
        yield from device_batches(loader, self.pipeline, train, epoch, start)


class WorkerDecodedPath(DecodedPath):
    """The training batches decoded and augmented in the loader's workers (`WorkerPipeline`): moved to the device
    only; the validation batches as the training process's DecodedPath."""

    in_workers = True

    def __init__(self, decoded: DecodedPath):
        self.pipeline_args, self.device, self.decode_in = decoded.pipeline_args, decoded.device, decoded.decode_in
        self.pipeline = decoded.pipeline

    def prepare(self, images, train: bool) -> torch.Tensor:
        """A training batch (made ready in the workers) moved to the device; a validation batch decoded there."""
        return images.to(self.device, non_blocking=True) if train else self.pipeline(images, train)

    def transfer(self, batch):
        """A training batch of the loader moved to the device ahead of `batches` (`Prefetcher`, on CUDA)."""
        return transfer(batch, self.device)

    def batches(self, loader, train: bool, epoch: int = 0, start: int = 0):
        """The training batches moved to the device; the validation batches as `DecodedPath.batches`."""
        if not train:
            return super().batches(loader, train, epoch, start)
        return on_device(loader, self.prepare, train, self.device)


def input_way(run, device: torch.device) -> str:
    """How an image run's batches become the model's input, from its flags (`RunConfig` `run`) alone: "decoded" on
    the device where --decode-on device asks; else "normalised" on the device on CUDA (--normalise-on auto) or where
    asked; else "host". The splits are built for it (vspec/train/data/splits.py), then `input_path` makes its path.

    Args:
        run: the run's RunConfig.
        device: this process's device."""
    if run.decode_on == "device":  # auto is host while the device path's intermittent stall on CUDA (issue 47) is open
        return "decoded"
    on = run.normalise_on if run.normalise_on != "auto" else ("device" if device.type == "cuda" else "host")
    return "normalised" if on == "device" else "host"


def input_path(run, recipe, spec, inputs: dict, rank: int, device: torch.device, train, data: str):
    """(the path, the training split, the loader's collate or None) of an image run (`RunConfig` `run`) whose splits
    were built for its `input_way`, chosen once: decoded on the device by the training process, or by the loader's
    workers (WorkerDecodedPath, the samples indexed) where --decode-in (or AHEAD under auto) says so and `train` is a
    map (a stream's workers read their shards in order, not samples by index: the data set `data` is named in the
    refusal); normalised on the device; or on the host. `inputs`: the run's mean, std and interpolation (None or
    missing: the defaults).

    Args:
        run: the run's RunConfig.
        recipe: the run's Recipe (its augmentations).
        spec: the spec trained (its size and channels).
        inputs: the run's inputs.
        rank: this process's rank.
        device: this process's device.
        train: the training split.
        data: the data set's name."""
    way, channels_last = input_way(run, device), device.type == "cuda" and run.channels_last
    mean, std = inputs.get("mean"), inputs.get("std")
    if way == "host":
        return HostPath(device, channels_last), train, None
    if way == "normalised":
        return NormalisedPath(DeviceNormalise(spec.in_chans, device, re_prob=recipe.re_prob,
                                              channels_last=channels_last, mean=mean, std=std)), train, None
    args = dict(img_size=spec.img_size, in_chans=spec.in_chans, random_resized_crop=recipe.random_resized_crop,
                auto_augment=recipe.auto_augment, re_prob=recipe.re_prob,
                crop_ratio=eval_crop_ratio(recipe.random_resized_crop), mean=mean, std=std,
                interpolation=inputs.get("interpolation") or INTERPOLATION, channels_last=channels_last,
                seed=run.seed, rank=rank)
    stream = isinstance(train, IterableDataset)
    if run.decode_in == "workers" and stream:
        raise DataError(f"--decode-in workers: for --data imagefolder ({data}'s workers read their shards in order; "
                        "--decode-in main)")
    decoded = DecodedPath(args, device, run.decode_in)
    if (run.decode_in if run.decode_in != "auto" else AHEAD) == "workers" and not stream:
        return WorkerDecodedPath(decoded), Indexed(train), WorkerPipeline(args, device)
    return decoded, train, collate_encoded
