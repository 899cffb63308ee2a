"""--data hf --streaming: a Hugging Face split's parquet or arrow files (`hf.split_files`) read as a stream, never
materialised: pyarrow reads the row groups (parquet) or record batches (arrow) a loader worker needs, two columns
of them, and the stream batches and splits itself as --data shards' does (vspec/train/data/shards.py: the
batching, the resume, the workers' rotation and errors are its `ShardStream`'s).

Training, per epoch (seed, epoch): the split's files in an order shuffled by (seed, epoch); their rows, file after
file, make the epoch's sequence of N rows. With P processes, W loader workers (1 without) and a batch of B, every
process trains T = floor(N / P / B) batches: process p reads the rows [p T B, (p + 1) T B) of the sequence, and
within them the worker that makes batches r, r + W, ... (as the DataLoader takes them in turn) reads a contiguous
part, as many rows as those batches hold. So every row is read once an epoch by one worker whatever the files'
sizes (the last N - P T B rows of the sequence, the end of its last file, wait for an epoch that orders them
earlier), any number of files or row groups goes round any number of processes and workers, and a worker reads
only the row groups that hold its rows (with fewer row groups than processes x workers, a `note:`: workers that
share a row group each read all of it). Each worker shuffles its rows through a buffer of 1000 seeded by (seed,
epoch, process, worker); each training sample's random draws are seeded by (seed, epoch, its row in the split: the
files in `split_files`' order), as the map-style path seeds its (vspec/train/data/loader.py's `Seeded`). A resume
in the middle of an epoch drops each worker's share of the batches done from its stream before decoding
(ShardStream's): the order is a function of (seed, epoch, P, W), so a resumed run keeps --workers (the checkpoint
records it).

Validation: the rows in the files' order, unshuffled, each once, in contiguous parts over the processes and their
workers.

A file that is no parquet or arrow file, whose columns differ from the features' (missing, or of another type: a
schema that lies), a row group that cannot be read or holds other than its footer's count, a row without an image or
a label, a label out of range, an image that does not decode: one `DataError` naming the file (and the row group or
the row).
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...spec.errors import show_key
from .hf import image_columns
from .registry import DataError, Request, open_regular
from .shards import ShardStream
from .sources import decode_image

__all__ = ["HFStream", "layout", "streams"]

_PARQUET = b"PAR1"
_ARROW_FILE = b"ARROW1"  # the IPC file format's magic; datasets' own .arrow files are IPC streams


def _why(e: Exception) -> str:
    """pyarrow's message, as an error line may show it (its bytes from the file: printable, cut)."""
    return f"{type(e).__name__}: {show_key(str(e))}"


def _kind(path: str) -> str:
    with open_regular(path, "a parquet or arrow file") as f:  # no FIFO, no device
        head = f.read(6)
    return "parquet" if head[:4] == _PARQUET else "arrow-file" if head == _ARROW_FILE else "arrow"


def _open(f: dict):
    """(schema, reader) of a file: a ParquetFile, an IPC file reader, or an IPC stream reader."""
    if f["kind"] == "parquet":
        reader = pq.ParquetFile(f["path"])
        return reader.schema_arrow, reader
    source = pa.memory_map(f["path"])
    reader = pa.ipc.open_file(source) if f["kind"] == "arrow-file" else pa.ipc.open_stream(source)
    return reader.schema, reader


def _type_error(schema: pa.Schema, image: str, label: str) -> str | None:
    """What is wrong with a file's columns for (image, label), or None."""
    for name, what in ((image, "image"), (label, "label")):
        if schema.get_field_index(name) < 0:
            return f"has no column {name!r} (the {what}s; its columns: {', '.join(schema.names)})"
    t = schema.field(image).type
    binary = (pa.types.is_binary(t) or pa.types.is_large_binary(t) or
              pa.types.is_struct(t) and t.get_field_index("bytes") >= 0 and
              (pa.types.is_binary(t.field("bytes").type) or pa.types.is_large_binary(t.field("bytes").type)))
    if not binary:
        return f"column {image!r} holds {t}, not encoded images (struct<bytes, path> or binary)"
    if not pa.types.is_integer(schema.field(label).type):
        return f"column {label!r} holds {schema.field(label).type}, not class indices (integers)"
    return None


def layout(paths: list[str], image: str, label: str, split: str) -> list[dict]:
    """Each file of a split as {name, path, kind, groups (rows of each row group / record batch), count, start (its
    first row's place in the split)}, its columns checked; `split` names the split in messages.

    Args:
        paths: the split's files.
        image: the image column.
        label: the label column.
        split: the split's name."""
    files, start = [], 0
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        f = dict(name=name, path=path, kind=_kind(path))
        try:
            schema, reader = _open(f)
            if f["kind"] == "parquet":
                groups = [reader.metadata.row_group(g).num_rows for g in range(reader.metadata.num_row_groups)]
            elif f["kind"] == "arrow-file":
                groups = [reader.get_batch(g).num_rows for g in range(reader.num_record_batches)]
            else:
                groups = [batch.num_rows for batch in reader]
        except (OSError, pa.ArrowException, ValueError) as e:
            raise DataError(f"hf: {path}: not a parquet or arrow file datasets writes ({_why(e)})") from None
        wrong = _type_error(schema, image, label)
        if wrong:
            raise DataError(f"hf: {path}: {wrong}")
        files.append(dict(f, groups=groups, count=sum(groups), start=start))
        start += files[-1]["count"]
    if not start:
        raise DataError(f"hf: {split}: the split holds no rows ({len(paths)} file{'s' * (len(paths) != 1)})")
    return files


def _image_columns(images: pa.Array) -> tuple[list, list | None]:
    """(bytes or None, path or None) of each row of an image column: datasets' struct<bytes, path>, or binary."""
    if not pa.types.is_struct(images.type):
        return images.to_pylist(), None
    fields = images.flatten()
    path = images.type.get_field_index("path")
    return fields[images.type.get_field_index("bytes")].to_pylist(), fields[path].to_pylist() if path >= 0 else None


def _file_bytes(path: str | None, where: str) -> bytes:
    """The bytes of a row's image stored as a path (datasets' Image without bytes), a regular file's only."""
    if path is None:
        raise DataError(f"{where} has no image (neither bytes nor a path)")
    try:
        with open_regular(path, "an image file") as f:
            return f.read()
    except OSError as e:
        raise DataError(f"{where}: its image {path} cannot be read ({e.strerror or type(e).__name__})") from None


class HFStream(ShardStream):
    """One split's files as a stream of batches (module docstring); `len()` is its rows. `image` / `label`: the
    columns, `classes`: the label's names."""

    def __init__(self, files: list[dict], classes: list[str], transform, *, image: str, label: str, train: bool,
                 encoded: bool, seed: int):
        super().__init__(files, classes, transform, train=train, encoded=encoded, seed=seed)
        self.image, self.label = image, label

    def __getitem__(self, index):
        raise DataError("hf: --streaming reads in order, with no random access; leave --streaming out for this "
                        "command")

    def _fit(self, workers: int) -> int:
        groups = sum(len(f["groups"]) for f in self.shards)
        if self.train and self.rank == 0 and groups < self.world * self.workers:
            print(f"note: hf: {groups} row group{'s' * (groups != 1)} for {self.world} process"
                  f"{'es' * (self.world != 1)} x {self.workers} workers; workers that share a row group each read "
                  "all of it (more, smaller row groups read faster: to_parquet(batch_size=...))", file=sys.stderr)
        return workers

    def _span(self) -> tuple[int, int]:
        """(first row, rows) of this process's part of the epoch's sequence."""
        if self.train:
            n = self.batches() * self.batch_size
            return self.rank * n, n
        first = self.rank * len(self) // self.world
        return first, (self.rank + 1) * len(self) // self.world - first

    def _piece(self, role: int) -> tuple[int, int]:
        """(first row, end) of the worker in `role`: the rows of its batches role, role + W, ... of the process's."""
        first, n = self._span()
        batches, w = -(-n // self.batch_size), self.workers
        before = sum(len(range(r, batches, w)) for r in range(role))
        start = first + before * self.batch_size
        return start, min(start + len(range(role, batches, w)) * self.batch_size, first + n)

    def _count(self, worker: int) -> int:
        start, end = self._piece(worker)
        return end - start

    def _val_share(self, worker: int):
        return self._rows(range(len(self.shards)), *self._piece(worker))

    def _share(self, role: int, mine: int):
        order = np.random.default_rng((self.seed, self.epoch)).permutation(len(self.shards))
        return self._rows(order, *self._piece(role))

    def _decode(self, data: bytes, where: str):
        return decode_image(io.BytesIO(data), where)  # the map-style path's reader (RGB)

    def _draws(self, sample, key: tuple) -> tuple:
        """(seed, epoch, the sample's row in the split): the map-style path's key."""
        return self.seed, self.epoch, sample[3]

    def _rows(self, order, start: int, end: int):
        """The samples of rows [start, end) of the sequence of files in `order`."""
        at = 0
        for i in order:
            f = self.shards[i]
            lo, hi = max(start - at, 0), min(end - at, f["count"])
            if lo < hi:
                yield from self._read_rows(f, lo, hi)
            at += f["count"]
            if at >= end:
                return

    def _read_rows(self, f: dict, lo: int, hi: int):
        """(where, image bytes, label, row in the split) of the rows [lo, hi) of file `f`, their labels checked
        before any is handed on."""
        n = len(self.classes)
        for at, table in self._groups(f, lo, hi):
            a, b = max(lo - at, 0), min(hi - at, len(table))
            part, first = table.slice(a, b - a), at + a  # first: its first row in the file
            images, paths = _image_columns(part.column(self.image).combine_chunks())
            labels = part.column(self.label)
            if labels.null_count:
                row = first + int(np.flatnonzero(labels.is_null().to_numpy(zero_copy_only=False))[0])
                raise DataError(f"hf: {f['name']}: row {row} has no label ({self.label!r} is null)")
            labels = labels.to_numpy()
            bad = np.flatnonzero((labels < 0) | (labels >= n))
            if bad.size:
                value = int(labels[bad[0]])
                why = ("negative (ClassLabel's -1 is 'no label': an unlabelled split)" if value < 0 else
                       f"out of range: the classes are 0 to {n - 1}")
                raise DataError(f"hf: {f['name']}: row {first + int(bad[0])}: label {value} is {why}")
            for j, label in enumerate(labels.tolist()):
                where = f"hf: {f['name']}: row {first + j}"
                data = images[j] if images[j] is not None else _file_bytes(paths and paths[j], where)
                yield where, data, label, f["start"] + first + j

    def _groups(self, f: dict, lo: int, hi: int):
        """(first row, table) of each row group of `f` that holds rows of [lo, hi), read, its count checked."""
        unit = "row group" if f["kind"] == "parquet" else "record batch"
        columns = [self.image, self.label]
        g = at = 0
        try:
            _, reader = _open(f)
            batches = iter(reader) if f["kind"] == "arrow" else None
            for g, rows in enumerate(f["groups"]):
                if at >= hi:
                    return
                if at + rows <= lo:
                    if batches is not None:
                        next(batches)
                    at += rows
                    continue
                if f["kind"] == "parquet":
                    table = reader.read_row_group(g, columns=columns)
                else:
                    batch = next(batches) if batches is not None else reader.get_batch(g)
                    table = pa.Table.from_batches([batch]).select(columns)
                if len(table) != rows:
                    raise DataError(f"hf: {f['name']}: {unit} {g} holds {len(table)} rows, the file's metadata "
                                    f"says {rows} (the file changed since the split was opened)")
                yield at, table
                at += rows
        except (OSError, pa.ArrowException, StopIteration) as e:
            raise DataError(f"hf: {f['name']}: {unit} {g} cannot be read ({_why(e)})") from None


def _features(f: dict):
    """The `datasets.Features` a file's schema declares (its Hugging Face metadata, else its arrow types)."""
    from datasets import Features  # extra

    schema, _ = _open(f)
    return Features.from_arrow_schema(schema)


def _largest_label(files: list[dict], label: str) -> int:
    """The largest value of the label column over `files` (that column alone read)."""
    largest = -1
    for f in files:
        _, reader = _open(f)
        if f["kind"] == "parquet":
            parts = [reader.read(columns=[label]).column(label)]
        else:
            batches = reader if f["kind"] == "arrow" else (reader.get_batch(g) for g in range(len(f["groups"])))
            parts = [b.column(label) for b in batches]
        for part in parts:
            if len(part) and part.null_count < len(part):
                largest = max(largest, pc.max(part).as_py())
    return largest


def streams(r: Request, train_files: list[str], val_files: list[str], val_name: str):
    """(train stream, val stream, num_classes) of --data hf --streaming at `r.data_dir` (module docstring): the
    train split's files and the validation split's (`hf_images` chose them), their columns found from the first
    training file's features (`hf.image_columns`), the classes a ClassLabel's names, else 0 to the training split's
    largest label.

    Args:
        r: the run's data request.
        train_files: the training split's files.
        val_files: the validation split's files.
        val_name: the validation split's name."""
    where = r.data_dir
    first = dict(path=train_files[0], kind=_kind(train_files[0]))
    image, label, names = image_columns(_features(first), r.image_column, r.label_column)
    train = layout(train_files, image, label, f"{where}: train")
    val = layout(val_files, image, label, f"{where}: {val_name}")
    classes = names or [str(c) for c in range(_largest_label(train, label) + 1)]
    common = dict(image=image, label=label, encoded=r.encoded, seed=r.seed)
    return (HFStream(train, classes, r.train_transform, train=True, **common),
            HFStream(val, classes, r.eval_transform, train=False, **common), len(classes))
