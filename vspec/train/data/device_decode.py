"""JPEG decoding and DeiT's augmentations on the device (`vspec train --decode-on device`, for the data sets that
hold JPEG files): the loader's workers only read the files' bytes, the device decodes a batch at once
(torchvision's `decode_jpeg(device="cuda")`: nvJPEG) and augments it there (vspec/train/data/device_augment.py: the same
distributions as timm's transforms on the CPU path), and on CUDA the next batches are prepared on a side stream
while the model trains on this one. On the CPU the same code runs on CPU tensors (the tests' backend).

    collate_encoded(items)                -> (list of encoded images, labels)
    DevicePipeline(...)(data, train, g)   -> the model's input (N, C, H, W), normalised, on the device
    device_batches(loader, pipeline, ...) -> ready (images, target) batches, prepared ahead on CUDA
    WorkerPipeline(kwargs, device)        -> the same, run in the loader's worker processes (--decode-in workers)
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable, Iterator

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset
from torchvision.transforms.functional import center_crop

from .device_augment import ColorJitter, RandAugment, box_mask, crop_boxes, erase_boxes, to
from .preprocess import mean_std
from .registry import DataError

__all__ = ["CANVAS_MAX", "DevicePipeline", "Indexed", "JPEG", "WorkerPipeline", "collate_encoded", "decode",
           "device_batches"]

JPEG = b"\xff\xd8"
CANVAS_MAX = 1024  # the longest side laid into the batch for the random resized crop; larger images shrink first


def collate_encoded(items) -> tuple[list[torch.Tensor], torch.Tensor]:
    """A batch of (encoded image, label) items: the images as a list (their lengths differ), the labels stacked.

    Args:
        items: the (encoded image, label) items."""
    return [data for data, _ in items], torch.tensor([int(label) for _, label in items])


def decode(data: list[torch.Tensor], device: torch.device, in_chans: int) -> list[torch.Tensor]:
    """Encoded images -> uint8 (C, H, W) tensors on `device`: the JPEGs in one batched call (nvJPEG on CUDA), any
    other format torchvision reads on the CPU. A file that does not decode is one DataError naming its place.

    Args:
        data: the encoded images (uint8 tensors of their bytes).
        device: where they are decoded.
        in_chans: the channels decoded (1: greyscale, 3: RGB)."""
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg  # extra

    mode = ImageReadMode.RGB if in_chans == 3 else ImageReadMode.GRAY
    jpeg = [k for k, d in enumerate(data) if bytes(d[:2].tolist()) == JPEG]
    out: list[torch.Tensor | None] = [None] * len(data)
    try:
        if jpeg:
            decoded = decode_jpeg([data[k] for k in jpeg], mode=mode, device=device)
            for k, img in zip(jpeg, decoded):
                out[k] = img
        for k in set(range(len(data))) - set(jpeg):
            out[k] = decode_image(data[k], mode=mode).to(device, non_blocking=True)
    except RuntimeError:
        for k, d in enumerate(data):  # one by one, to name the bad one
            try:
                decode_image(d, mode=mode)
            except RuntimeError as e:
                raise DataError(f"image {k} of the batch ({len(d)} bytes) does not decode: {e}; "
                                f"--decode-on host names its file") from None
        raise
    return out


def _resize(img: torch.Tensor, size: tuple[int, int], interpolation: str) -> torch.Tensor:
    """uint8 (C, h, w) -> float (C, H, W): torchvision's antialiased resize (the CPU path's filter), not yet
    rounded."""
    x = img[None].float()
    if tuple(x.shape[-2:]) != tuple(size):
        aa = {"antialias": True, "align_corners": False} if interpolation != "nearest" else {}
        x = F.interpolate(x, size=size, mode=interpolation, **aa)
    return x[0]


def _eval_size(h: int, w: int, size: tuple[int, int], crop_ratio: float) -> tuple[int, int]:
    """The resized (height, width) before the centre crop, as build_transforms(train=False) resizes."""
    if crop_ratio == 1:
        return size
    scaled = tuple(max(1, round(s / crop_ratio)) for s in size)
    if size[0] == size[1]:  # torchvision's Resize(int): the shorter side, the longer truncated
        short, long = min(h, w), max(h, w)
        new_long = int(scaled[0] * long / short)
        return (scaled[0], new_long) if h <= w else (new_long, scaled[0])
    ratio = min(h / scaled[0], w / scaled[1])  # timm's ResizeKeepRatio(longest=0): cover both sides
    return round(h / ratio), round(w / ratio)


class DevicePipeline:
    """What build_transforms + DeviceNormalise do, from encoded images, on the device: in training with
    augmentation (random_resized_crop, auto_augment or re_prob, as on the CPU path), timm's random resized crop,
    horizontal flip, RandAugment (or colour jitter 0.4 without auto_augment), normalisation and random erasing;
    in training without, a plain resize; in evaluation, the resize and centre crop of `crop_ratio`. Random draws
    come from the generator passed in (`generator(epoch, batch)`: a batch's draws depend on the run's seed, its
    rank, the epoch and the batch alone)."""

    def __init__(self, img_size: tuple[int, int], in_chans: int, device: torch.device, *, random_resized_crop=False,
                 auto_augment: str | None = None, re_prob: float = 0.0, crop_ratio: float = 0.875, mean=None,
                 std=None, interpolation: str = "bicubic", channels_last: bool = False, seed: int = 0, rank: int = 0):
        self.size, self.in_chans, self.device = tuple(img_size), in_chans, device
        self.augment = bool(random_resized_crop or auto_augment or re_prob > 0)
        self.re_prob, self.crop_ratio, self.interpolation = re_prob, crop_ratio, interpolation
        self.channels_last, self.seed, self.rank = channels_last, seed, rank
        mean, std = mean_std(in_chans, mean, std)
        self.mean = torch.tensor(mean, device=device).view(1, -1, 1, 1) * 255
        self.std = torch.tensor(std, device=device).view(1, -1, 1, 1) * 255
        self.colour = None
        if self.augment and auto_augment:
            self.colour = RandAugment(auto_augment, mean, self.size, interpolation)
        elif self.augment and in_chans == 3:  # timm's colour jitter (0.4) where no auto_augment is given
            self.colour = ColorJitter(0.4)

    def generator(self, epoch: int, batch: int) -> torch.Generator:
        """The generator of one batch's draws, seeded from the run's seed, this rank, the epoch and the batch.

        Args:
            epoch: the epoch, from 0.
            batch: the batch's index in the epoch."""
        key = ((self.seed * 1_000_003 + self.rank) * 1_000_003 + epoch) * 1_000_003 + batch
        return torch.Generator().manual_seed(key % 2**63)

    def __call__(self, data: list[torch.Tensor], train: bool, g: torch.Generator | None = None) -> torch.Tensor:
        images = decode(data, self.device, self.in_chans)
        if train and self.augment:
            g = g if g is not None else torch.Generator().manual_seed(self.seed)
            x = self.crop(images, g)
            if self.colour is not None:
                x = self.colour.apply(x, self.colour.plan(len(x), g))
        elif train:
            x = torch.stack([_resize(img, self.size, self.interpolation) for img in images]).round_().clamp_(0, 255)
        else:
            # torchvision's CenterCrop: zero padding where smaller, then the centred window
            x = torch.stack([center_crop(_resize(img, _eval_size(*img.shape[-2:], self.size, self.crop_ratio),
                                                 self.interpolation), list(self.size)) for img in images])
            x = x.round_().clamp_(0, 255)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        x = x.sub_(self.mean).div_(self.std)
        if train and self.re_prob > 0:
            boxes = erase_boxes(len(x), *self.size, self.re_prob, g)
            x = x.masked_fill_(box_mask(boxes, *self.size, x.device), 0.0)
        return x

    def crop(self, images: list[torch.Tensor], g: torch.Generator) -> torch.Tensor:
        """timm's random resized crop of each image to the model's size, then a horizontal flip at rate 1/2. The
        images are laid into one zero-padded batch (a side over CANVAS_MAX shrunk first, its box with it) and
        torchvision's roi_align resamples every box at once: bilinear samples averaged over each output pixel's
        area (as many per pixel as the box is larger: an antialiased resize).

        Args:
            images: the decoded images, uint8 (C, H, W) each.
            g: the generator the boxes and flips are drawn from."""
        from torchvision.ops import roi_align  # extra

        sizes = torch.tensor([img.shape[-2:] for img in images])
        boxes = crop_boxes(sizes, g).double()
        flip = to(torch.rand(len(images), generator=g) < 0.5, self.device).view(-1, 1, 1, 1)
        scale = (CANVAS_MAX / sizes.amax(1).double()).clamp(max=1)
        shown = [img if s == 1 else _resize(img, tuple(round(float(v * s)) for v in img.shape[-2:]), "bilinear")
                 for img, s in zip(images, scale.tolist())]
        h, w = max(x.shape[-2] for x in shown), max(x.shape[-1] for x in shown)
        canvas = torch.zeros(len(images), images[0].shape[0], h, w, device=self.device)
        for k, x in enumerate(shown):
            canvas[k, :, : x.shape[-2], : x.shape[-1]] = x
        top, left, bh, bw = (boxes * scale[:, None]).unbind(1)
        rois = torch.stack([torch.arange(len(images), dtype=torch.float64), left, top, left + bw, top + bh], 1)
        out = roi_align(canvas, to(rois, self.device, torch.float32), self.size, 1.0, -1, aligned=True)
        return torch.where(flip, out.flip(-1), out).round_().clamp_(0, 255)


class Indexed(Dataset):
    """A data set's items with their index appended: (..., i) (`WorkerPipeline` seeds a batch from them)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        return (*self.dataset[i], i)


class WorkerPipeline:
    """`--decode-in workers`: a collate function that runs the DevicePipeline inside the loader's worker processes.
    On CUDA each worker (spawned) holds a CUDA context of its own, decodes and augments there and hands the batch
    over by CUDA IPC, so a decoder that waits for its device (torchvision's does) never drains the training
    process's queue. A batch's draws come from the run's seed and rank and its samples' indices (`Indexed`): the
    same batch gets the same draws whichever worker makes it, after a resume too. Validation batches stay
    encoded (`val_collate`) for the training process's pipeline."""

    on_device = True  # its batches are device tensors, not to be pinned
    val_collate = staticmethod(collate_encoded)

    def __init__(self, kwargs: dict, device: torch.device):
        self.kwargs, self.device, self.pipeline = kwargs, str(device), None
        self.worker_context = "spawn" if torch.device(device).type == "cuda" else None

    def __getstate__(self):
        return {**self.__dict__, "pipeline": None}  # each worker builds its own

    def __call__(self, items) -> tuple[torch.Tensor, torch.Tensor]:
        if self.pipeline is None:
            self.pipeline = DevicePipeline(**self.kwargs, device=torch.device(self.device))
        data, labels, index = zip(*items)
        key = torch.tensor([self.pipeline.seed, self.pipeline.rank, *index], dtype=torch.int64).numpy().tobytes()
        g = torch.Generator().manual_seed(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1)
        x = self.pipeline(list(data), True, g)
        if x.is_cuda:  # finished before the training process reads it
            torch.cuda.current_stream(x.device).synchronize()
        return x, torch.tensor(labels)


def device_batches(loader: Iterable, pipeline: DevicePipeline, train: bool, epoch: int = 0, start: int = 0,
                   depth: int = 2) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The loader's batches of encoded images made ready by `pipeline` (batch i's draws from
    `pipeline.generator(epoch, i)`, i counted from `start`), with their labels, on the device. On CUDA the next
    batches are prepared ahead on a side stream, as timm's prefetcher does: launched from this thread before the
    current batch goes to the step, up to `depth` batches in flight.

    Args:
        loader: batches of (encoded images, labels) (`collate_encoded`).
        pipeline: the run's `DevicePipeline`.
        train: augment (the training split), else the evaluation transform.
        epoch: the epoch, from 0.
        start: the index of the loader's first batch in the epoch (a resumed epoch).
        depth: batches in flight on CUDA."""
    device = pipeline.device
    if device.type != "cuda":
        for i, (data, target) in enumerate(loader, start):
            yield pipeline(data, train, pipeline.generator(epoch, i)), target.to(device)
        return
    stream = torch.cuda.Stream(device)
    pending: deque = deque()
    for i, (data, target) in enumerate(loader, start):
        with torch.cuda.stream(stream):
            x = pipeline(data, train, pipeline.generator(epoch, i))
            t = target.to(device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(stream)
        pending.append((x, t, event))
        if len(pending) >= depth:
            yield _ready(*pending.popleft(), device)
    while pending:
        yield _ready(*pending.popleft(), device)


def _ready(x: torch.Tensor, t: torch.Tensor, event, device) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch prepared on the side stream, for the current one: it waits for the batch's event there, and the
    allocator keeps the memory until the current stream is done with it."""
    current = torch.cuda.current_stream(device)
    current.wait_event(event)
    x.record_stream(current)
    t.record_stream(current)
    return x, t
