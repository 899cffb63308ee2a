"""Text from Hugging Face datasets (`--data hf`, opened by vspec/train/data/hf.py): a GLUE task (`--task`) from the
Hub's GLUE (`nyu-mll/glue` in the local cache) or a folder or files of its shape, and any text classification set
(`--text-columns a[,b] --label-column c`). Read as the TSV reader's examples (vspec/train/text/readers.py), its
classes in the same order, so that the same rows give the same run.

A GLUE task's columns are the Hub's (`_HUB_COLUMNS`); its labels are mapped onto the TSV reader's classes by name:
the reader's own names, or the Hub's ClassLabel names (`_HUB_LABELS`, whose index is the TSV files' digit for CoLA,
SST-2, MRPC, QQP and WNLI; MNLI's order differs from the reader's), and integers are the Hub's class indices.
Another set's label column decides the task as run_glue.py does: float scores a regression, else classes (a
ClassLabel's names, integers as the class indices, strings sorted). A row without a label (-1, as GLUE's test
splits), without a text or with a label outside the classes is refused in one line naming the split and row."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import attrs

from ..data.hf import _snapshot, _split_word, hub_id, open_splits, split_files
from ..data.hf_images import val_split
from ..data.registry import DataError, Request
from .readers import ENTAIL, GLUE, PAIR, Example, Task

__all__ = ["hf_text"]

# the Hub GLUE's text columns and ClassLabel names, in its class-index order (its loading script's label_classes)
_HUB_COLUMNS = {"cola": ("sentence", None), "sst2": ("sentence", None), "mrpc": PAIR, "stsb": PAIR,
               "qqp": ("question1", "question2"), "mnli": ("premise", "hypothesis"), "qnli": ("question", "sentence"),
               "rte": PAIR, "wnli": PAIR}
_HUB_LABELS = {"cola": ("unacceptable", "acceptable"), "sst2": ("negative", "positive"),
              "mrpc": ("not_equivalent", "equivalent"), "qqp": ("not_duplicate", "duplicate"),
              "mnli": ("entailment", "neutral", "contradiction"), "qnli": ENTAIL, "rte": ENTAIL,
              "wnli": ("not_entailment", "entailment")}
_VALIDATION = {"mnli": "validation_matched"}  # the split validated on by default; else "validation"
_MAX_CLASSES = 2**16  # integer labels are class indices: a larger one is no class


def hf_text(r: Request) -> tuple[list[Example], list[Example], str | Task]:
    """The training split and the validation split (--val-split; default: MNLI's `validation_matched`, else
    `validation`, else `test`) of the dataset at `r.data_dir`, as examples, and the task: the GLUE task `r.task`,
    or a `Task` of the data set's own columns and classes.

    Args:
        r: the run's data request (data_dir, task, split, text_columns, the dataset's options)."""
    where = r.data_dir
    if where is None:
        raise DataError("hf: --data hf needs --data-dir: a save_to_disk folder, parquet / arrow files, or a Hub "
                        "dataset id in the local cache")
    config = _config(r)
    names = list(split_files(where, config))
    if "train" not in names:
        raise DataError(f"hf: {where}: no train split (its splits: {', '.join(names)})")
    mnli = _VALIDATION.get(r.task)
    val_name = val_split(attrs.evolve(r, split=r.split or (mnli if mnli in names else None)), names)
    splits = open_splits(where, config, ["train", val_name])
    for name, ds in splits.items():
        if len(ds) == 0:
            raise DataError(f"hf: {where} {name}: an empty split (no rows)")
    train, val = splits["train"], splits[val_name]
    label = r.label_column or ("label" if r.task else _label_column(train, where))
    columns = r.text_columns or (_HUB_COLUMNS[r.task] if r.task else _text_column(train, label, where))
    a, b = (*columns, None)[:2]
    for name, ds in splits.items():
        for column in (a, b, label):
            if column is not None and column not in ds.features:
                raise DataError(f"hf: {where} {name}: no column {column!r} (its columns: {', '.join(ds.features)})"
                                + ("; name it with --label-column" if column == label else
                                   "; name the text columns with --text-columns"))
    decode = _glue_labels(r.task, train.features[label], label) if r.task else _own_labels(train, val, label)
    task = r.task or Task({"train": "train", "validation": val_name}, a, b, label, decode.classes, decode.metric)
    return (_examples(train, a, b, label, decode, f"hf: {where} train"),
            _examples(val, a, b, label, decode, f"hf: {where} {val_name}"), task)


def _config(r: Request) -> str | None:
    """The configuration read: --subset's; else the --task's folder where WHERE holds configurations (the Hub's
    GLUE: rte/, mnli/, ...), refused in one line when it has no such folder; else none (a folder of one task)."""
    if r.subset is not None or r.task is None:
        return r.subset
    root = _snapshot(r.data_dir) if hub_id(r.data_dir) else Path(r.data_dir)
    if not root.is_dir() or (root / "dataset_dict.json").exists() or (root / "state.json").exists():
        return None
    configs = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")
                     and d.name != "data" and not _split_word(d.name))  # as vspec/train/data/hf.py finds them
    if configs and r.task not in configs:
        raise DataError(f"hf: --task {r.task}: {r.data_dir} holds no such configuration (its configurations: "
                        f"{', '.join(configs)})")
    return r.task if configs else None


def _strings(ds) -> list[str]:
    """The split's string columns."""
    return [n for n, f in ds.features.items() if getattr(f, "dtype", None) in ("string", "large_string")]


def _label_column(ds, where: str) -> str:
    """The label column of a set without --task or --label-column: its one ClassLabel column, else `label`."""
    from datasets import ClassLabel  # extra

    found = [n for n, f in ds.features.items() if isinstance(f, ClassLabel)]
    if len(found) == 1 or "label" in ds.features:
        return found[0] if len(found) == 1 else "label"
    raise DataError(f"hf: {where}: which column is the label? ({', '.join(found) or 'no ClassLabel column, no label'}"
                    f"; its columns: {', '.join(ds.features)}): name it with --label-column")


def _text_column(ds, label: str, where: str) -> tuple[str]:
    """The text column of a set without --task or --text-columns: its one string column (the label's aside)."""
    found = [n for n in _strings(ds) if n != label]
    if len(found) == 1:
        return (found[0],)
    raise DataError(f"hf: {where}: which columns are the text? (its string columns: {', '.join(found) or 'none'}): "
                    "name one or two with --text-columns a[,b]")


class _Labels(NamedTuple):
    """How a label column's values become the reader's labels: `classes` (None: a regression) and `metric`;
    `value(x)` the label of one value, or a message naming what is wrong with it."""

    classes: tuple[str, ...] | None
    metric: str
    value: Callable[[Any], float | int | str]


def _kind(feature) -> str:
    """A label feature's kind: classlabel, int, float, string, or what else it is."""
    from datasets import ClassLabel, Value  # extra

    if isinstance(feature, ClassLabel):
        return "classlabel"
    dtype = feature.dtype if isinstance(feature, Value) else type(feature).__name__
    for kind in ("int", "float", "string"):
        if dtype.startswith(kind) or dtype.startswith("u" + kind) or dtype == "large_" + kind:
            return kind
    return dtype


def _unlabelled(x) -> str | None:
    """What is wrong with a label that is none (ClassLabel's -1, or a missing value); None for a label."""
    if x is None or x == -1:
        return "has no label (-1 or empty: an unlabelled split, as GLUE's test splits)"
    return None


def _glue_labels(task: str, feature, column: str) -> _Labels:
    """The GLUE task's labels from a column: the reader's classes (TSV's order), a ClassLabel's or string's names
    mapped by name (the reader's own or the Hub's), integers as the Hub's class indices; STS-B's float scores."""
    spec, kind = GLUE[task], _kind(feature)
    if spec.labels is None:
        return _scores(kind, column, f"{task}'s labels are scores (numbers)", unlabelled=True)
    hub = _HUB_LABELS[task]
    by_name = {**{n: spec.labels.index(n if n in spec.labels else str(i)) for i, n in enumerate(hub)},
               **{n: i for i, n in enumerate(spec.labels)}}  # the Hub's name of a class, or the reader's
    classes = f"{task}'s classes ({', '.join(spec.labels)}" + (
        f", or the Hub's {', '.join(hub)})" if set(hub) != set(spec.labels) else ")")
    if kind == "classlabel":
        if unknown := [n for n in feature.names if n not in by_name]:
            raise DataError(f"hf: --label-column {column!r}: the ClassLabel's names {', '.join(map(repr, unknown))} "
                            f"are not {classes}")
        index = [by_name[n] for n in feature.names]
        if len(set(index)) < len(index):
            raise DataError(f"hf: --label-column {column!r}: the ClassLabel names two of its classes alike "
                            f"({', '.join(feature.names)}): one of {task}'s each")

        def named(x):
            return _unlabelled(x) or (index[x] if 0 <= x < len(index) else f"label {x} is not a class index of its "
                                      f"ClassLabel (0-{len(index) - 1})")
        return _Labels(spec.labels, spec.metric, named)
    if kind == "int":
        def hub_index(x):
            return _unlabelled(x) or (by_name[hub[x]] if 0 <= x < len(hub) else f"label {x} is not one of the "
                                      f"Hub's {task} class indices (0-{len(hub) - 1})")
        return _Labels(spec.labels, spec.metric, hub_index)
    if kind == "string":
        return _Labels(spec.labels, spec.metric,
                       lambda x: _unlabelled(x) or by_name.get(x, f"label {x!r} is not one of {classes}"))
    raise DataError(f"hf: --label-column {column!r}: {kind} values; {task}'s labels are classes (a ClassLabel, "
                    "integers or names)")


def _scores(kind: str, column: str, what: str, unlabelled: bool = False) -> _Labels:
    """Scores (a regression, Pearson's correlation its headline metric): finite numbers; with `unlabelled`, -1 is
    no label (STS-B's test split)."""
    if kind not in ("int", "float"):
        raise DataError(f"hf: --label-column {column!r}: {kind} values; {what}")

    def score(x):
        if unlabelled and x == -1:
            return _unlabelled(x)
        return float(x) if x is not None and math.isfinite(x) else f"score {x!r} is not a finite number"
    return _Labels(None, "pearson", score)


def _own_labels(train, val, column: str) -> _Labels:
    """A set's own labels, decided by the column's feature as run_glue.py does: float scores a regression
    (Pearson's correlation its headline metric), else classes (accuracy): a ClassLabel's names, integers 0..the
    largest as the class indices, strings (sorted, as run_glue sorts them)."""
    feature, kind = train.features[column], _kind(train.features[column])
    if kind == "float":
        return _scores(kind, column, "")
    if kind == "classlabel":
        n = feature.num_classes
        return _Labels(tuple(feature.names), "accuracy", lambda x: _unlabelled(x) or (
            x if 0 <= x < n else f"label {x} is not a class index of its ClassLabel (0-{n - 1})"))
    if kind == "int":
        top = max((x for ds in (train, val) for x in _column(ds, column) if x is not None), default=0)
        if top >= _MAX_CLASSES:
            raise DataError(f"hf: --label-column {column!r}: label {top}: integer labels are class indices, at most "
                            f"{_MAX_CLASSES - 1}")
        return _Labels(tuple(str(i) for i in range(top + 1)), "accuracy", lambda x: _unlabelled(x) or (
            x if x >= 0 else f"label {x} is negative: no class index"))
    if kind == "string":
        names = tuple(sorted({x for x in _column(train, column) if x is not None}))
        return _Labels(names, "accuracy", lambda x: _unlabelled(x) or (
            names.index(x) if x in names else f"label {x!r} is none of the training split's ({', '.join(names)})"))
    raise DataError(f"hf: --label-column {column!r}: {kind} values; a label is a class (a ClassLabel, integers, "
                    "strings) or a score (floats)")


def _column(ds, name: str) -> list:
    """A column's values, in the split's order (its indices mapping followed)."""
    return ds.select_columns([name]).with_format("arrow")[:].column(name).to_pylist()


def _examples(ds, a: str, b: str | None, label: str, decode: _Labels, where: str) -> list[Example]:
    """A split's rows as examples: text columns of strings, no text None, each label decoded (one line naming the
    row otherwise)."""
    for column in (a, b):
        if column is not None and column not in _strings(ds):
            raise DataError(f"{where}: column {column!r} holds {_kind(ds.features[column])}, not text")
    texts_a, texts_b, labels = _column(ds, a), _column(ds, b) if b else None, _column(ds, label)
    out = []
    for i, (x, y) in enumerate(zip(texts_a, labels)):
        pair = None if texts_b is None else texts_b[i]
        if x is None or (b is not None and pair is None):
            raise DataError(f"{where} row {i}: column {a if x is None else b!r} is None: no text")
        value = decode.value(y)
        if isinstance(value, str):
            raise DataError(f"{where} row {i}: {value}")
        out.append(Example(x, pair, value))
    return out
