"""--data shards: WebDataset tar shards and their manifest (`vspec data pack`, vspec/train/data/pack.py), read in order,
as iterable streams that batch and split themselves.

--data-dir: the pack's folder (or URL prefix) holding manifest.json, or a pattern of training shards as webdataset
takes them ('OUT/train-{000000..000127}.tar', 'https://host/d/train-{000000..000127}.tar', 'pipe:curl -s
https://host/d/train-{000000..000127}.tar'); the manifest is found beside the first shard (its file name replaced
by manifest.json), and so are the validation shards the manifest lists (vspec/train/data/manifest.py: the addresses,
the manifest checked; its names are pack's, so only --data-dir itself may be a command).

Training, per epoch (seed, epoch): the training shards in a shuffled order; shard i goes to process i % P, and
within it to worker (i // P) % W (P processes, W loader workers, W = 1 without workers; with fewer than P x W
shards W is floor(shards / P), with a note: no worker without shards of its own, none read twice): a worker reads
only its shards, through a shuffle buffer seeded by (seed, epoch, process, worker). Every process gets the same
number of batches, floor(samples / P / batch), shared round-robin among its workers as the DataLoader takes them;
a worker whose shards hold fewer samples than its share reads them again, one whose shards hold more stops early
(as webdataset's `with_epoch`: with uneven shards a few samples repeat or wait for the next epoch). The order is a
function of (seed, epoch, P, W): a resumed run keeps --workers (the checkpoint records it). A resume in the middle
of an epoch skips the batches done: each worker drops its share of them from its stream before decoding, and the
workers are rotated so that the DataLoader's first worker makes the next batch. Each training sample's random draws
(its transforms') are seeded by (seed, epoch, process, batch, place in the batch): a resumed run draws as the
uninterrupted one.

Validation: the validation shards split the same way, unshuffled, every sample once over the processes.

A bad shard (truncated, not a tar, an image that does not decode, a label out of range, a count or sha256 that
differs from the manifest's, a FIFO or device, a member beyond MAX_MEMBER, an endless stream) is one `DataError`
naming the shard and the member.
"""

from __future__ import annotations

import hashlib
import io
import sys
import tarfile

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, IterableDataset, default_collate, get_worker_info

from ..signals import worker_init
from .loader import sample_draws
from .pack import MANIFEST, MAX_MEMBER, SPLITS
from .registry import DataError, Request

__all__ = ["Failure", "MAX_PARTS", "SHUFFLE_BUFFER", "ShardLoader", "ShardStream", "TRAILER", "decode", "shards",
           "shuffled"]

SHUFFLE_BUFFER = 1000  # samples (their encoded bytes) each worker holds to shuffle
MAX_PARTS = 8  # members of one sample (pack writes two)
TRAILER = 1 << 20  # bytes after a tar's end (its last record's padding) read into the shard's sha256


# ---------------------------------------------------------------- the shards
class _Hashing:
    """A file object that hashes what is read from it."""

    def __init__(self, f):
        self.f, self.digest = f, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.digest.update(data)
        return data

    def finish(self, name: str) -> str:
        """The sha256 of the whole file, the bytes after the tar's end included (at most TRAILER of them: an
        endless stream is no shard)."""
        left = TRAILER
        while data := self.read(1 << 16):
            left -= len(data)
            if left < 0:
                raise DataError(f"shards: {name}: more than {TRAILER >> 20} MiB after the tar's end: not the shard "
                                "the manifest lists")
        return self.digest.hexdigest()


def _members(shard: dict):
    """(member name, bytes) of a shard in order, each at most MAX_MEMBER bytes and at most MAX_PARTS per sample
    of the manifest's count; returns the shard's sha256."""
    from .manifest import close_quietly, open_file  # extra: webdataset (not for the streams built on ShardStream)

    where, name, members = "at its start", shard["name"], 0
    raw = None
    try:
        raw = open_file(shard["url"])
        f = _Hashing(raw)
        with tarfile.open(fileobj=f, mode="r|") as tar:
            for info in tar:
                members += 1
                if info.size > MAX_MEMBER:  # read whole below: a bound before the read
                    raise DataError(f"shards: {name}: member {info.name} holds {info.size:,} bytes, more than the "
                                    f"{MAX_MEMBER >> 30} GiB a member may hold (vspec data pack writes none larger)")
                if members > MAX_PARTS * shard["count"]:
                    raise DataError(f"shards: {name}: more than {members - 1} members for the manifest's "
                                    f"{shard['count']} samples: not the shard the manifest lists")
                if info.isreg():
                    where = f"in member {info.name}"
                    data = tar.extractfile(info).read()
                    where = f"after member {info.name}"
                    yield info.name, data
        digest = f.finish(name)
        raw.close()  # read to its end: a pipe: command's exit status counts
        return digest
    except (OSError, EOFError, tarfile.TarError) as e:
        raise DataError(f"shards: {name}: truncated or not a tar ({where}: {e})") from None
    finally:
        if raw is not None:
            close_quietly(raw)  # a stream left early (the worker's share ends inside it)


def _samples(shard: dict, num_classes: int):
    """(where: "shards: SHARD: MEMBER" of the image, its bytes, label) of a shard's samples (webdataset's grouping:
    KEY.EXT members in a row make one sample)."""
    def done(key, parts):
        image = next((e for e in parts if e != "cls"), None)
        if image is None or "cls" not in parts:
            raise DataError(f"shards: {shard['name']}: sample {key} has {', '.join(sorted(parts))}; expected an image "
                            "and a .cls member")
        try:
            label = int(parts["cls"])
        except ValueError:
            raise DataError(f"shards: {shard['name']}: {key}.cls is no class index: {parts['cls'][:20]!r}") from None
        if not 0 <= label < num_classes:
            raise DataError(f"shards: {shard['name']}: {key}.cls: label {label} is out of range for the manifest's "
                            f"{num_classes} classes")
        return f"shards: {shard['name']}: {key}.{image}", parts[image], label

    key, parts, count = None, {}, 0
    members = _members(shard)
    while True:
        try:
            member, data = next(members)
        except StopIteration as end:
            digest = end.value
            break
        base, _, ext = member.rpartition("/")[2].partition(".")
        this = member[:len(member) - len(member.rpartition("/")[2])] + base
        if key is not None and this != key:
            yield done(key, parts)
            count, parts = count + 1, {}
            if count >= shard["count"]:  # one more sample than the manifest says: no need to read them all
                raise DataError(f"shards: {shard['name']}: holds more than the manifest's {shard['count']} samples "
                                "(not the shard the manifest lists)")
        key, parts[ext.lower()] = this, data
    if key is not None:
        yield done(key, parts)
        count += 1
    if count != shard["count"]:  # a tar cut between members reads as a shorter one
        raise DataError(f"shards: {shard['name']}: holds {count} samples, the manifest says {shard['count']} "
                        "(truncated, or not the shard the manifest lists)")
    if digest != shard["sha256"]:
        raise DataError(f"shards: {shard['name']}: its sha256 {digest[:16]}... is not the manifest's "
                        f"{shard['sha256'][:16]}...: the shard changed since it was packed")


def decode(data: bytes, where: str) -> Image.Image:
    """An encoded image's bytes as a PIL image, or one DataError line naming it (`where`: the stream's words).

    Args:
        data: the encoded image.
        where: where it was read (shard and member), for the error line."""
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise DataError(f"{where} is not a readable image ({e})") from None
    return image


# ---------------------------------------------------------------- the stream
class Failure:
    """A worker's DataError, handed to the main process as an item (a worker's exception would come with its
    traceback in the message)."""

    def __init__(self, message: str):
        self.message = message


def shuffled(items, rng: np.random.Generator, size: int):
    """A shuffle buffer of `size` items (the first yielded once it is full).

    Args:
        items: the items, in order.
        rng: the generator drawn from.
        size: the buffer's size."""
    buffer = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        i = int(rng.integers(len(buffer)))
        buffer[i], item = item, buffer[i]
        yield item
    rng.shuffle(buffer)
    yield from buffer


class ShardStream(IterableDataset):
    """One split's shards as a stream of batches (module docstring); `len()` is its samples. `loader(...)` sets
    the batch and the layout and returns its DataLoader; `set_epoch(epoch, skip)` (skip: samples of this
    process's epoch already trained) before each epoch."""

    def __init__(self, shards: list[dict], classes: list[str], transform, *, train: bool, encoded: bool, seed: int):
        self.shards, self.classes, self.transform = shards, classes, transform
        self.train, self.encoded, self.seed = train, encoded, seed
        self.batch_size, self.collate, self.rank, self.world, self.workers = 1, default_collate, 0, 1, 1
        self.epoch, self.skip = 0, 0

    def __len__(self) -> int:
        return sum(s["count"] for s in self.shards)

    def __getitem__(self, index):
        raise DataError("shards: read in order, with no random access; use --data imagefolder for this command")

    def batches(self) -> int:
        """This process's batches in an epoch (training), or in its validation shards."""
        if self.train:
            return len(self) // self.world // self.batch_size
        return sum(-(-self._count(w) // self.batch_size) for w in range(self.workers))

    def _count(self, worker: int) -> int:
        return sum(s["count"] for s in self.shards[self.rank::self.world][worker::self.workers])

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """The epoch the next iteration reads, and the samples of this rank it skips (whole batches, a resumed
        epoch); one DataError line otherwise.

        Args:
            epoch: the epoch, from 0.
            skip: samples of this rank already trained on in this epoch."""
        total = self.batches() * self.batch_size
        if not 0 <= skip <= total or skip % self.batch_size:
            raise DataError(f"skip: must be whole batches in [0, {total}] (samples per rank per epoch), got {skip}")
        self.epoch, self.skip = epoch, skip

    def loader(self, *, batch_size: int, workers: int, seed: int, rank: int, world_size: int, collate_fn=None):
        """The DataLoader of this stream (`ShardLoader`: the stream yields whole batches); one DataError line when a
        rank's training samples hold no full batch.

        Args:
            batch_size: samples per batch and rank.
            workers: loading processes (fewer where the shards do not go round; 0: the main process reads).
            seed: seeds the loader's generator.
            rank: this process's rank.
            world_size: the processes of the run.
            collate_fn: makes a batch of samples (default: torch's default_collate)."""
        self.batch_size, self.collate = batch_size, collate_fn or default_collate
        self.rank, self.world, self.workers = rank, world_size, max(workers, 1)
        workers = self._fit(workers)
        if self.train and self.batches() < 1:
            raise DataError(f"batch_size: {batch_size} per rank is more than the {len(self) // world_size} training "
                            "samples per rank, so no full batch exists; lower the batch size")
        self.set_epoch(0)
        # workers start afresh each epoch: they copy this stream's epoch and skip
        return ShardLoader(self, batch_size=None, num_workers=workers, pin_memory=torch.cuda.is_available(),
                           generator=torch.Generator().manual_seed(seed), worker_init_fn=worker_init)

    def _fit(self, workers: int) -> int:
        """The loader's workers for this layout: each reads shards of its own (fewer, with a note, where there are
        too few shards to go round)."""
        rank, world_size = self.rank, self.world
        n = len(self.shards)
        fit = n // world_size if self.train else len(self.shards[rank::world_size])  # shards each worker's own
        if self.train and not fit:
            raise DataError(f"shards: {n} training shard{'s' * (n != 1)} for {world_size} processes; each process "
                            "needs one: fewer processes, or pack smaller shards (vspec data pack --shard-size)")
        if self.workers > max(fit, 1):
            if self.train and rank == 0:
                print(f"note: shards: {n} training shard{'s' * (n != 1)} for {world_size} process"
                      f"{'es' * (world_size != 1)} x {self.workers} workers; each worker reads shards of its own: "
                      f"{fit} worker{'s' * (fit != 1)} a process (vspec data pack --shard-size: more shards)",
                      file=sys.stderr)
            self.workers = max(fit, 1)  # validation: none idle
            workers = self.workers
        return workers

    def __iter__(self):
        info = get_worker_info()
        worker = info.id if info is not None else 0
        try:
            yield from (self._train(worker) if self.train else self._val(worker))
        except DataError as e:
            yield Failure(str(e))

    def _val(self, worker: int):
        yield from self._batched(self._val_share(worker))

    def _val_share(self, worker: int):
        """The validation samples `worker` of this process reads, in order."""
        shards = self.shards[self.rank::self.world][worker::self.workers]
        return (s for shard in shards for s in self._read(shard))

    def _train(self, worker: int):
        w, done = self.workers, self.skip // self.batch_size
        role = (worker + done) % w  # the worker whose batches this one makes (the DataLoader starts at worker 0)
        total = self.batches()
        mine = len(range(role, total, w))  # batches role, role + w, ... of this process's epoch
        skipped = len(range(role, done, w))
        rng = np.random.default_rng((self.seed, self.epoch, self.rank, self.world, role, w))
        stream = shuffled(self._share(role, mine), rng, SHUFFLE_BUFFER)
        for _ in range(skipped * self.batch_size):
            next(stream)
        keys = ((self.seed, self.epoch, self.rank, b) for b in range(role, total, w)[skipped:])  # its batches'
        yield from self._batched(stream, keys)

    def _share(self, role: int, mine: int):
        """The samples of the `mine` batches the worker in `role` makes this epoch, in reading order."""
        order = np.random.default_rng((self.seed, self.epoch)).permutation(len(self.shards))
        shards = [self.shards[i] for i in order[self.rank::self.world][role::self.workers]]
        return self._cycle(shards, mine * self.batch_size)

    def _cycle(self, shards: list[dict], n: int):
        """The first `n` samples of `shards`, read again from the first where they hold fewer."""
        while n > 0:
            before = n
            for shard in shards:
                for sample in self._read(shard):
                    if n == 0:
                        return
                    yield sample
                    n -= 1
            if n == before:
                raise DataError(f"shards: {', '.join(s['name'] for s in shards)} hold no samples")

    def _read(self, shard: dict):
        return _samples(shard, len(self.classes))

    def _item(self, sample, key):
        where, data, label = sample[:3]
        if self.encoded:
            return torch.frombuffer(bytearray(data), dtype=torch.uint8), label
        image = self._decode(data, where)
        if key is None or not self.transform:
            return (self.transform(image) if self.transform else image), label
        with sample_draws(*self._draws(sample, key)):
            return self.transform(image), label

    def _decode(self, data: bytes, where: str):
        return decode(data, where)

    def _draws(self, sample, key: tuple) -> tuple:
        """What seeds a training sample's draws: (seed, epoch, process, batch, place in the batch)."""
        return key

    def _batched(self, samples, keys=None):
        """The samples in batches; with `keys` (training: each batch's), sample j's draws seeded by (*key, j)."""
        keys = iter(keys or ())
        batch, key = [], next(keys, None)
        for sample in samples:
            batch.append(self._item(sample, None if key is None else (*key, len(batch))))
            if len(batch) == self.batch_size:
                yield self.collate(batch)
                batch, key = [], next(keys, None)
        if batch:
            yield self.collate(batch)


class ShardLoader(DataLoader):
    """A stream's DataLoader: `len()` is its batches; a worker's `Failure` is raised here as a DataError. `iter()`
    starts the workers at once, as DataLoader's own does (not at the first batch: that is read where a stop signal
    ends the wait, signals.Batches, and one must not land inside torch's iterator while it starts its workers)."""

    def __len__(self) -> int:
        ds = self.dataset
        return ds.batches() - ds.skip // ds.batch_size if ds.train else ds.batches()

    def __iter__(self):
        return self._checked(super().__iter__())

    @staticmethod
    def _checked(batches):
        for batch in batches:
            if isinstance(batch, Failure):
                shutdown = getattr(batches, "_shutdown_workers", None)
                if shutdown is not None:  # now: collected later with its queues (the error's traceback holds them),
                    shutdown()  # its workers would never hear the end, each waited on for 5 s
                raise DataError(batch.message)
            yield batch


# ---------------------------------------------------------------- the loader of --data shards
def shards(r: Request):
    """(train stream, val stream, num_classes) of the pack at `r.data_dir` (module docstring).

    Args:
        r: the run's data request."""
    from .manifest import locate, read_manifest, shard_in  # extra: webdataset

    (before, after), urls = locate(r.data_dir)
    where = before + MANIFEST + after
    manifest = read_manifest(where)  # its names are pack's: no shell command, no other folder or host
    listed = {s: {x["name"]: dict(x, url=before + x["name"] + after) for x in manifest[s]} for s in SPLITS}
    if urls is None:
        train = list(listed["train"].values())
    else:
        train = []
        for url in urls:
            name = shard_in(url)
            if name not in listed["train"]:
                raise DataError(f"shards: {url} is not a training shard of the manifest {where}")
            train.append(dict(listed["train"][name], url=url))
    classes = manifest["classes"]
    common = dict(encoded=r.encoded, seed=r.seed)
    return (ShardStream(train, classes, r.train_transform, train=True, **common),
            ShardStream(list(listed["val"].values()), classes, r.eval_transform, train=False, **common),
            len(classes))
