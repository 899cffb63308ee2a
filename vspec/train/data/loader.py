"""The loaders of a run: torch's DataLoader over a data set's splits, the training order resumable mid-epoch, each
training sample's random draws its own.

    build_loaders(train, val, batch_size=...)         -> (train_loader, val_loader)
    ResumableSampler                                  epoch order from (seed, epoch), `skip` to resume
    set_epoch(train_loader, epoch, skip)              the epoch's order: its sampler's, or a stream's (shards)
    sample_draws(*key)                                a sample's draws from the global streams, seeded by `key`
    to_device(batch, device)                          a batch's inputs on the device (images, a text batch's dict)
    transfer(batch, device)                           a training batch, (inputs, target), moved to the device
    on_device(loader, prepare, train, device)         a loader's batches, inputs prepared and targets moved
"""

from __future__ import annotations

import random
from contextlib import contextmanager

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset, Sampler, get_worker_info

from ..signals import worker_init
from ..validators import MAX_WORKERS
from .registry import DataError

__all__ = ["EpochKeys", "ResumableSampler", "Seeded", "build_loaders", "on_device", "sample_draws",
           "set_epoch", "to_device", "transfer"]


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
        """Shuffle for `epoch` (as DistributedSampler) and skip this rank's first `skip` samples of it (a
        resumed epoch); one DataError line for a skip outside [0, samples per rank].

        Args:
            epoch: the epoch, from 0.
            skip: samples of this rank already trained on in this epoch."""
        if not 0 <= skip <= self.num_samples:
            raise DataError(f"skip: must be in [0, {self.num_samples}] (samples per rank per epoch), got {skip}")
        super().set_epoch(epoch)
        self.skip = skip

    def __iter__(self):
        return iter(list(super().__iter__())[self.skip:])

    def __len__(self) -> int:
        return self.num_samples - self.skip


@contextmanager
def sample_draws(*key: int):
    """Python's, numpy's and torch's (CPU) global streams seeded from `key` (non-negative ints: the run's seed, the
    epoch, the sample) while one training sample is made: the draws of its transforms (timm's RandAugment, random
    erasing, the random resized crop, ...) then depend on the sample alone, not on the worker that reads it, how far
    that worker had read, or where the run was resumed. In the main process (--workers 0) the streams are put back
    afterwards: the training's own draws (mixup, dropout) go on as without data.

    Args:
        *key: non-negative ints: the run's seed, the epoch, the sample's index."""
    saved = (random.getstate(), np.random.get_state(), torch.get_rng_state()) if get_worker_info() is None else None
    high, low = (int(w) for w in np.random.SeedSequence(key).generate_state(2))
    random.seed(high << 32 | low)
    np.random.seed(low)
    torch.random.default_generator.manual_seed(high << 32 | low)
    try:
        yield
    finally:
        if saved is not None:
            random.setstate(saved[0])
            np.random.set_state(saved[1])
            torch.set_rng_state(saved[2])


class EpochKeys(Sampler):
    """A ResumableSampler's indices as (epoch, index) keys, for `Seeded`; `set_epoch` is the sampler's."""

    def __init__(self, sampler: ResumableSampler):
        self.sampler = sampler

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """The sampler's `set_epoch` (see `ResumableSampler.set_epoch`).

        Args:
            epoch: the epoch, from 0.
            skip: samples of this rank already trained on in this epoch."""
        self.sampler.set_epoch(epoch, skip=skip)

    def __iter__(self):
        epoch = self.sampler.epoch
        return ((epoch, i) for i in self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)


class Seeded(Dataset):
    """A training data set read by (epoch, index) keys (`EpochKeys`), each item made under `sample_draws(seed,
    epoch, index)`."""

    def __init__(self, dataset, seed: int):
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]):
        epoch, i = key
        with sample_draws(self.seed, epoch, i):
            return self.dataset[i]


def set_epoch(loader: DataLoader, epoch: int, skip: int = 0) -> None:
    """The epoch's order and the samples of it already trained (`skip`, per rank): the ResumableSampler's, or the
    stream's (an IterableDataset: --data shards, vspec/train/data/shards.py).

    Args:
        loader: the training loader (`build_loaders`).
        epoch: the epoch, from 0.
        skip: samples of this rank already trained on in this epoch."""
    stream = isinstance(loader.dataset, IterableDataset)
    (loader.dataset if stream else loader.sampler).set_epoch(epoch, skip=skip)


def build_loaders(train_ds, val_ds, *, batch_size: int, workers: int = 0, seed: int = 0, rank: int = 0,
                  world_size: int = 1, drop_last: bool = True, collate_fn=None):
    """(train_loader, val_loader). `batch_size` is per rank.

    Train: ResumableSampler (shuffled by (seed, epoch), this rank's share), each sample's random draws seeded by
    (seed, epoch, index) (`Seeded`: the same whichever worker reads it, however many there are, and after a resume);
    call `set_epoch(train_loader, epoch, skip)` each epoch. A stream
    (an IterableDataset: --data shards) makes its own loaders, splitting itself (`ShardStream.loader`).
    Val: in order; with world_size > 1 a DistributedSampler without shuffle (which repeats a few samples to
    give every rank the same count). pin_memory when CUDA is available. `collate_fn`: how samples become a
    batch (text: padded to the batch's longest sequence); None: stacked.

    Args:
        train_ds: the training set (a Dataset, or a stream).
        val_ds: the validation set.
        batch_size: samples per batch and rank.
        workers: loading processes.
        seed: the run's seed.
        rank: this process's rank.
        world_size: the processes of the run.
        drop_last: drop the training split's last partial batch.
        collate_fn: makes a batch of samples, or None."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise DataError(f"batch_size: must be an int >= 1, got {batch_size!r}")
    if not isinstance(workers, int) or not 0 <= workers <= MAX_WORKERS:
        raise DataError(f"workers: must be an int in [0, {MAX_WORKERS}] (4 per core, at least 32), got {workers!r}")
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
    # a collate that makes device tensors in the workers (device_decode.WorkerPipeline) says how its workers start,
    # is not pinned, and names the validation split's own collate
    on_device = getattr(collate_fn, "on_device", False)
    context = getattr(collate_fn, "worker_context", None) if workers > 0 else None
    train_loader = DataLoader(Seeded(train_ds, seed), sampler=EpochKeys(sampler), drop_last=drop_last,
                              generator=torch.Generator().manual_seed(seed),
                              **{**common, "pin_memory": common["pin_memory"] and not on_device},
                              multiprocessing_context=context)
    val_sampler = (DistributedSampler(val_ds, num_replicas=world_size, rank=rank, shuffle=False)
                   if world_size > 1 else None)
    val_loader = DataLoader(val_ds, sampler=val_sampler, shuffle=False, drop_last=False,
                            **{**common, "collate_fn": getattr(collate_fn, "val_collate", collate_fn)})
    return train_loader, val_loader


def to_device(batch, device):
    """A batch of images, or a text batch's dict of input_ids / attention_mask / token_type_ids, on `device`.

    Args:
        batch: the batch.
        device: where it goes."""
    if isinstance(batch, dict):
        return {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    return batch.to(device, non_blocking=True)


def transfer(batch, device):
    """A training batch of the loader, (inputs, target), moved to `device` ahead of its use (`Prefetcher`, on
    CUDA): what the image paths and the text task hand over when their inputs need nothing but the move.

    Args:
        batch: (inputs, target).
        device: where it goes."""
    inputs, target = batch
    return to_device(inputs, device), target.to(device, non_blocking=True)


def on_device(loader, prepare, train: bool, device):
    """The loader's batches (inputs, target) in order, each made ready as it is taken: `prepare(inputs, train)`,
    the target moved to `device`: what the image paths whose workers made the inputs ready and the text task yield.

    Args:
        loader: the batches, (inputs, target) each.
        prepare: the inputs on the device, ready for the model (an input path's or a task's `prepare`).
        train: whether they are training batches (passed to `prepare`).
        device: where the targets go."""
    for inputs, target in loader:
        yield prepare(inputs, train), target.to(device, non_blocking=True)
