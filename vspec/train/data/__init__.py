"""Image data for training and evaluation, one job per module:

    registry      the data sets' table (`DataSet`, `register_dataset`, `DataError`, `open_regular`): torch-free
    sources       the readers (CIFAR, ImageFolder, digits, mnist5k, synthetic) and `build_datasets`
    transforms    timm's / torchvision's training and evaluation transforms (`build_transforms`)
    preprocess    a run's mean, std, interpolation and validation crop (`resolve_inputs`, `mean_std`): torch-free
    loader        torch's DataLoaders of a run (`build_loaders`, `ResumableSampler`, `set_epoch`, `sample_draws`)
    pipelines     the input path a run chooses once: host, normalised on the device, decoded on the device
    device_decode JPEG decoding and augmentation on the device (`DevicePipeline`, `WorkerPipeline`)
    device_augment DeiT's augmentations as batched tensor operations
    prefetch      the next training batches fetched by a thread of their own (`Prefetcher`)
    pack, manifest, shards  `vspec data pack`'s WebDataset shards, their addresses, their reader (--data shards)

This package imports none of them (torch-free); the names of the module vspec/train/data.py it replaces still
import from here, with a DeprecationWarning naming their new module (vspec/_moved.py)."""

from ..._moved import moved

__all__ = []


def __getattr__(name: str):
    return moved(__name__, name)
