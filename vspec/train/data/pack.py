"""`vspec data pack`: an image folder (DIR/train/<class>/, DIR/val/<class>/, as --data imagefolder reads), or with
--from-hf a Hugging Face dataset (vspec/train/data/pack_hf.py), as WebDataset tar shards for --data shards
(vspec/train/data/shards.py). Torch-free: the standard library's tarfile.

OUT/train-000000.tar ..., OUT/val-000000.tar ... and OUT/manifest.json, written last (a folder without it is an
unfinished pack). A shard holds up to `shard_size` samples, each two members, KEY.<the image's own extension>
(its file's bytes, not re-encoded) and KEY.cls (the class index in ASCII); KEY is the sample's number in its
split. The training split is shuffled by `seed` before packing (a shard then holds every class, which the reader's
shuffle buffer needs), validation keeps the folder's order. Members carry no time or owner: the same folder and
seed give the same bytes. The manifest records the class names (index order) and, per split, every shard's name,
sample count and sha256.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path

from .registry import DataError, open_regular

__all__ = ["FORMAT", "IMAGE_SUFFIXES", "MANIFEST", "MAX_MEMBER", "MIN_SHARDS", "Progress", "Reader", "SHARD_BYTES",
           "SPLITS", "check_shard_size", "clear", "default_shard_size", "image_bytes", "is_shard_name", "pack", "scan",
           "shard_name", "write_pack"]

MANIFEST = "manifest.json"
FORMAT = "vspec-shards/1"
SPLITS = ("train", "val")
# torchvision's ImageFolder extensions (IMG_EXTENSIONS): what --data imagefolder reads
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
MAX_MEMBER = 1 << 30  # bytes of an image file in a shard (Pillow refuses 179 M pixels: 0.5 GiB as 8-bit RGB)
MIN_SHARDS = 8  # the default --shard-size's training shards: the default --workers' ceiling on CUDA (one process)
SHARD_BYTES = 1 << 30  # ... and its most bytes a shard (WebDataset's own packs: ~1 GB shards)
Progress = Callable[[str, int, int], None]  # (split, samples done, samples in all)
Reader = Callable[[int, int], Iterable[tuple[str, bytes, int]]]  # (start, stop) -> (suffix, bytes, label)
_NAME = re.compile(r"([a-z]+)-(\d{6,9})\.tar", re.ASCII)


def shard_name(split: str, index: int) -> str:
    """A shard's file name: `<split>-<index, 6 digits>.tar` (train-000000.tar).

    Args:
        split: "train" or "val".
        index: the shard's place in its split, from 0."""
    return f"{split}-{index:06d}.tar"


def is_shard_name(split: str, name) -> bool:
    """Whether `name` is a name `shard_name(split, ...)` writes (no other text: a manifest's names reach no
    shell, no parent folder, no other host).

    Args:
        split: "train" or "val".
        name: the name read (any value)."""
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    return m is not None and m[1] == split and shard_name(split, int(m[2])) == name


def scan(folder: Path) -> tuple[list[str], dict[str, list[tuple[Path, int]]]]:
    """(class names, {split: [(image file, class index)]}), classes and files sorted as ImageFolder sorts them.

    Args:
        folder: the image folder (train/<class>/, val/<class>/)."""
    classes: dict[str, list[str]] = {}
    for split in SPLITS:
        root = folder / split
        if not root.is_dir():
            raise DataError(f"pack: no folder {root} (expected {folder}/train/<class>/ and {folder}/val/<class>/)")
        classes[split] = sorted(e.name for e in os.scandir(root) if e.is_dir())
    if classes["train"] != classes["val"] or not classes["train"]:
        raise DataError(f"pack: {folder}/train and {folder}/val need the same class folders, at least one; train "
                        f"has {len(classes['train'])}, val {len(classes['val'])}")
    names = classes["train"]
    files = {}
    for split in SPLITS:
        files[split] = [(path, label) for label, name in enumerate(names)
                        for path in sorted((folder / split / name).rglob("*"))
                        if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file()]
        if not files[split]:
            raise DataError(f"pack: {folder}/{split} holds no images ({', '.join(IMAGE_SUFFIXES)})")
        big = next((path for path, _ in files[split] if path.stat().st_size > MAX_MEMBER), None)
        if big is not None:  # the reader refuses such a member (vspec/train/data/shards.py)
            raise _too_big(big)
    return names, files


def default_shard_size(sizes: list[int]) -> int:
    """Images a shard for training images of `sizes` bytes: at least MIN_SHARDS training shards (one a loader
    worker, vspec.train.distributed.workers_for), at most ~SHARD_BYTES each (ImageNet: ~9,500 images).

    Args:
        sizes: the training images' sizes in bytes."""
    blocks = sum(-(-size // 512) for size in sizes) * 512 + 1536 * len(sizes)  # a sample: 2 headers, the .cls
    return max(1, min(-(-len(sizes) // MIN_SHARDS), SHARD_BYTES * len(sizes) // max(blocks, 1)))


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o444, 0
    tar.addfile(info, io.BytesIO(data))


def image_bytes(path: Path) -> bytes:
    """The bytes of an image file, at most MAX_MEMBER: a file whose size its stat does not tell (/proc's) is read up
    to the bound; an error reading it (EIO of /proc/self/mem), a missing file, a FIFO or a device names it.

    Args:
        path: the image file."""
    try:
        with open_regular(path, "an image file") as f:
            data = f.read(MAX_MEMBER + 1)
    except FileNotFoundError:
        raise DataError(f"pack: {path}: no such file") from None
    except OSError as e:
        raise DataError(f"pack: {path}: cannot be read ({e.strerror or type(e).__name__})") from None
    if len(data) > MAX_MEMBER:
        raise _too_big(path)
    return data


def _too_big(path: Path) -> DataError:
    return DataError(f"pack: {path} is larger than {MAX_MEMBER >> 30} GiB, the most a shard's member may hold")


def _write_shard(path: Path, samples: Iterable[tuple[int, str, bytes, int]]) -> str:
    """One shard of (number, suffix, image bytes, label) samples; returns its sha256."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for number, suffix, data, label in samples:
            _member(tar, f"{number:08d}.{suffix}", data)
            _member(tar, f"{number:08d}.cls", str(label).encode())
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def clear(out: Path, overwrite: bool) -> None:
    """Refuse an OUT that holds anything unless `overwrite`; then remove an earlier pack's files (only those).

    Args:
        out: the pack's folder.
        overwrite: --overwrite."""
    if out.exists() and not out.is_dir():
        raise DataError(f"pack: {out} is not a folder")
    if not out.exists() or not any(out.iterdir()):
        return
    if not overwrite:
        raise DataError(f"pack: {out} is not empty; pass --overwrite to replace an earlier pack there")
    for path in out.iterdir():
        if path.name == MANIFEST or (path.suffix == ".tar" and path.name.startswith(tuple(f"{s}-" for s in SPLITS))):
            path.unlink()


def pack(folder: str | Path, out: str | Path, *, shard_size: int | None = None, seed: int = 0,
         overwrite: bool = False, progress: Progress | None = None) -> dict:
    """Pack `folder` into `out`; returns the manifest. `shard_size` None: `default_shard_size`. `progress(split,
    done, total)` after every shard.

    Args:
        folder: the image folder (train/<class>/, val/<class>/).
        out: the pack's folder.
        shard_size: images per shard, or None.
        seed: the training shards' shuffle (recorded in the manifest).
        overwrite: replace what OUT holds.
        progress: called after every shard, or None."""
    folder, out = Path(folder), Path(out)
    check_shard_size(shard_size)
    classes, files = scan(folder)
    if shard_size is None:
        shard_size = default_shard_size([path.stat().st_size for path, _ in files["train"]])
    splits = {}
    for split in SPLITS:
        samples = files[split]
        if split == "train":
            samples = list(samples)
            random.Random(seed).shuffle(samples)
        splits[split] = (len(samples), lambda start, stop, samples=samples: (
            (path.suffix.lower().lstrip(".").replace("jpeg", "jpg"), image_bytes(path), label)
            for path, label in samples[start:stop]))
    return write_pack(out, classes, splits, shard_size=shard_size, seed=seed, overwrite=overwrite, progress=progress)


def check_shard_size(shard_size) -> None:
    """Refuse a --shard-size that is not an int >= 1 (None: the default) with one DataError line.

    Args:
        shard_size: samples per shard, or None."""
    if shard_size is not None and (not isinstance(shard_size, int) or shard_size < 1):
        raise DataError(f"pack: --shard-size must be an int >= 1, got {shard_size!r}")


def write_pack(out: Path, classes: list[str], splits: dict[str, tuple[int, Reader]], *, shard_size: int, seed: int,
               overwrite: bool, progress: Progress | None) -> dict:
    """Write the shards and the manifest (last) into `out` (cleared first: `clear`); `splits[split]` is (its
    samples, `read(start, stop)`: the (suffix, image bytes, label) of samples start..stop - 1, in packing order).
    Returns the manifest.

    Args:
        out: the pack's folder.
        classes: the class names, in index order.
        splits: per split, (its samples, its reader).
        shard_size: images per shard.
        seed: the seed the training samples were shuffled by (recorded in the manifest).
        overwrite: replace what OUT holds.
        progress: called after every shard, or None."""
    clear(out, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"format": FORMAT, "classes": classes, "seed": seed, "shard_size": shard_size}
    for split in SPLITS:
        total, read = splits[split]
        shards = []
        for start in range(0, total, shard_size):
            stop = min(start + shard_size, total)
            name = shard_name(split, len(shards))
            samples = ((start + i, *sample) for i, sample in enumerate(read(start, stop)))
            shards.append({"name": name, "count": stop - start, "sha256": _write_shard(out / name, samples)})
            if progress is not None:
                progress(split, stop, total)
        manifest[split] = shards
    (out / (MANIFEST + ".tmp")).write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(out / (MANIFEST + ".tmp"), out / MANIFEST)  # last: a folder with a manifest is a whole pack
    return manifest
