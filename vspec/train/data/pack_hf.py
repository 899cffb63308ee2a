"""`vspec data pack --from-hf WHERE OUT`: a Hugging Face dataset (--data hf's splits, columns and labels,
vspec/train/data/hf_images.py) as vspec's shards, written by vspec/train/data/pack.py's `write_pack`."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path

from .hf import image_columns, open_splits
from .pack import MAX_MEMBER, Progress, Reader, check_shard_size, default_shard_size, image_bytes, write_pack
from .registry import DataError, Request

__all__ = ["pack_hf"]

# PIL's formats a shard may hold (what --data imagefolder's files hold; GIF too), and their members' suffixes
_HF_FORMATS = {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "WEBP": "webp", "BMP": "bmp", "PPM": "ppm", "TIFF": "tif",
              "GIF": "gif"}
_HF_ROWS = 256  # rows gathered from the arrow table at once


def pack_hf(where: str, out: str | Path, *, subset: str | None = None, image_column: str | None = None,
            label_column: str | None = None, val_split: str | None = None, shard_size: int | None = None,
            seed: int = 0, overwrite: bool = False, progress: Progress | None = None) -> dict:
    """Pack a Hugging Face dataset into `out` as `pack` packs an image folder; returns the manifest. `where` and the
    options are --data hf's, and so are the splits, columns and labels read (vspec/train/data/hf_images.py): the
    train split becomes the training shards, the validation split (`val_split`, else validation, else test) the
    validation shards; the classes are the ClassLabel's names (an integer label column: "0" to its largest). Each
    image is the bytes the dataset stores, not re-encoded (a JPEG the same bytes; an image written as pixels the
    PNG `datasets` made of them; a row stored as a file's path that file's bytes), under its format's suffix. The
    training rows are packed in the order `random.Random(seed).shuffle(list(range(rows)))` leaves them, validation
    in the split's row order.

    Args:
        where: the dataset (--data-dir of --data hf).
        out: the pack's folder.
        subset: its configuration, or None.
        image_column: the image column, or None (found).
        label_column: the label column, or None (found).
        val_split: the split validated on, or None.
        shard_size: images per shard, or None.
        seed: the training shards' shuffle (recorded in the manifest).
        overwrite: replace what OUT holds.
        progress: called after every shard, or None."""
    from .hf_images import hf_images  # torch: the --data hf reader's checks

    out = Path(out)
    check_shard_size(shard_size)
    _outside(where, out)
    train, val, num_classes = hf_images(Request(data_dir=where, subset=subset, image_column=image_column,
                                                label_column=label_column, split=val_split, encoded=True))
    # the class names (hf_images hands over labels alone): the train split opened again, memory-mapped, no row read
    names = image_columns(open_splits(where, subset, ["train"])["train"].features, image_column, label_column)[2]
    order = list(range(len(train)))
    random.Random(seed).shuffle(order)
    if shard_size is None:
        shard_size = default_shard_size(_sizes(train.split.with_format("arrow")[train.column]))
    splits = {split: (len(rows), _reader(ds, rows)) for split, ds, rows in (("train", train, order),
                                                                          ("val", val, range(len(val))))}
    return write_pack(out, names or [str(k) for k in range(num_classes)], splits, shard_size=shard_size, seed=seed,
                      overwrite=overwrite, progress=progress)


def _outside(where: str, out: Path) -> None:
    """Refuse an OUT inside the folder of a local dataset (a saved folder, a folder of files, a glob's folder): the
    shards would land among the files the dataset is read from."""
    text = str(where)
    cut = min((text.index(c) for c in "*?[" if c in text), default=None)
    base = Path(text) if cut is None else Path(text[:cut] + "x").parent
    if not base.exists():  # a Hub id: its files are in the cache
        return
    root = (base if base.is_dir() else base.parent).resolve()
    if out.resolve() == root or root in out.resolve().parents:
        raise DataError(f"pack: OUT {out} is inside the dataset's folder {root}: write the shards to another folder")


def _sizes(column) -> list[int]:
    """The stored images' sizes in bytes (a row stored as a path: its file's, where it is one)."""
    import pyarrow.compute as pc  # extra: datasets

    data, paths = pc.struct_field(column, "bytes"), pc.struct_field(column, "path").to_pylist()
    return [size if size is not None else (os.stat(path).st_size if path and os.path.isfile(path) else 0)
            for size, path in zip(pc.binary_length(data).to_pylist(), paths)]


def _reader(ds, rows) -> Reader:
    """`write_pack`'s reader of the rows `rows` (in packing order) of `ds` (hf_images' HFImages: the image column
    as stored, the checked labels)."""
    table = ds.split.with_format("arrow")

    def read(start: int, stop: int):
        for at in range(start, stop, _HF_ROWS):
            chunk = rows[at:min(at + _HF_ROWS, stop)]
            cells = (table[chunk.start:chunk.stop] if isinstance(chunk, range) else table[chunk])[ds.column]
            for row, cell in zip(chunk, cells.to_pylist()):
                where = f"{ds.name} row {row}"
                data = _stored(cell or {}, where)
                yield _suffix(data, where), data, int(ds.targets[row])
    return read


def _stored(cell: dict, where: str) -> bytes:
    """An Image cell's bytes: its {"bytes"}, else the file at its {"path"}."""
    if cell.get("bytes") is None and cell.get("path"):
        try:
            return image_bytes(Path(cell["path"]))
        except DataError as e:  # the row, then the file
            raise DataError(f"{where}: {str(e).removeprefix('pack: ')}") from None
    data = cell.get("bytes")
    if not data:
        raise DataError(f"{where}: holds no image ({'no bytes, no path' if data is None else 'empty bytes'})")
    if len(data) > MAX_MEMBER:
        raise DataError(f"{where}: larger than {MAX_MEMBER >> 30} GiB, the most a shard's member may hold")
    return data


def _suffix(data: bytes, where: str) -> str:
    """The member suffix of an image's format (PIL reads its header only); bytes of no format in _HF_FORMATS are
    one line naming them."""
    from PIL import Image, UnidentifiedImageError  # extra: pillow (vspec[train])

    try:
        with Image.open(io.BytesIO(data)) as img:
            found = img.format
    except UnidentifiedImageError:
        raise DataError(f"{where}: not an image (its first bytes: {data[:12]!r})") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise DataError(f"{where}: not a readable image ({e})") from None
    if found not in _HF_FORMATS:
        raise DataError(f"{where}: a {found} image; the shards hold {', '.join(_HF_FORMATS)}")
    return _HF_FORMATS[found]
