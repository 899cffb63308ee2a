"""Malformed text data from Hugging Face datasets (issue 61, item 2), for the malformed-input corpus
(tests/helpers/cli_corpus.py) and tests/train/text/test_hf.py: each case a dataset written here with `datasets`
(save_to_disk, or the Hub cache's layout), the `vspec train --data hf` flags that read it, and the words its one
line must hold. Nothing is downloaded: the Hub and datasets are offline, their caches under the case's folder."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.data_corpus import TEXT_SPEC
from tests.helpers.hf_data import hub_cache

ENTAIL = ["entailment", "not_entailment"]
STARS = ["--label-column", "stars"]


def _dataset(columns: dict, features: dict | None = None, raw: bool = False):
    """A Dataset of `columns`; `features` declared (by `datasets`' types), or with `raw` declared without encoding the
    values (a ClassLabel that its values lie about, as a file written by other tools can)."""
    import datasets
    import pyarrow as pa

    feats = datasets.Features(features) if features else None
    if raw:
        return datasets.Dataset(pa.table(columns), info=datasets.DatasetInfo(features=feats))
    return datasets.Dataset.from_dict(columns, features=feats)


def _rte(labels, label_feature=None, raw: bool = False, b=None):
    """RTE-shaped rows: sentence pairs and `labels` (ClassLabel ENTAIL unless `label_feature` says otherwise)."""
    import datasets

    n = len(labels)
    feature = label_feature or datasets.ClassLabel(names=ENTAIL)
    return _dataset({"sentence1": [f"a good film {i}" for i in range(n)],
                     "sentence2": b if b is not None else [f"the plot {i}" for i in range(n)], "label": labels},
                    {"sentence1": datasets.Value("string"), "sentence2": datasets.Value("string"), "label": feature},
                    raw)


def _reviews(labels, text=None, extra=None):
    """A review set of another shape: a `review` column (and `extra` string columns) and `labels`."""
    n = len(labels)
    return _dataset({"review": text or [f"a witty moving film {i}" for i in range(n)], **(extra or {}),
                     "stars": labels})


def variants() -> dict[str, tuple]:
    """Case name -> (DatasetDict's splits as functions, the flags, the words of the error). Functions, so that
    `datasets` is imported only when a case is written."""
    import datasets

    ok = lambda: _rte([0, 1, 0, 1])  # noqa: E731
    rte = ["--task", "rte"]
    return {
        "no text column": ({"train": lambda: _reviews([0, 1]), "validation": lambda: _reviews([1, 0])},
                           ["--text-columns", "sentence", *STARS], "no column 'sentence'"),
        "no task column": ({"train": lambda: _reviews([0, 1]), "validation": lambda: _reviews([1, 0])},
                           [*rte, *STARS], "no column 'sentence1'"),
        "label strings not the task's": (
            {"train": lambda: _rte(["entailment", "maybe"], datasets.Value("string")), "validation": ok}, rte,
            "label 'maybe' is not one of rte's classes"),
        "ClassLabel names not the task's": (
            {"train": lambda: _rte([0, 1], datasets.ClassLabel(names=["yes", "no"])), "validation": ok}, rte,
            "the ClassLabel's names 'yes', 'no' are not rte's classes"),
        "label strings unseen in training": (
            {"train": lambda: _reviews(["pos", "neg"]), "validation": lambda: _reviews(["pos", "meh"])}, STARS,
            "label 'meh' is none of the training split's (neg, pos)"),
        "label out of the ClassLabel's range": ({"train": lambda: _rte([0, 5], raw=True), "validation": ok}, rte,
                                                "label 5 is not a class index of its ClassLabel (0-1)"),
        "negative integer label": ({"train": lambda: _reviews([0, -3]), "validation": lambda: _reviews([0, 1])},
                                   STARS, "label -3 is negative"),
        "float labels for classes": (
            {"train": lambda: _rte([0.0, 1.0], datasets.Value("float32")), "validation": ok}, rte,
            "float values; rte's labels are classes"),
        "None text": ({"train": lambda: _rte([0, 1], b=["x", None]), "validation": ok}, rte,
                      "column 'sentence2' is None: no text"),
        "empty split": ({"train": lambda: _rte([]), "validation": ok}, rte, "train: an empty split"),
        "unlabelled split": ({"train": ok, "validation": ok, "test": lambda: _rte([-1, -1])},
                             [*rte, "--val-split", "test"], "row 0: has no label (-1"),
        "a number as the text": ({"train": lambda: _reviews([0, 1]), "validation": lambda: _reviews([1, 0])},
                                 ["--text-columns", "stars", *STARS], "holds int, not text"),
        "which text column": (
            {"train": lambda: _reviews([0, 1], extra={"title": ["a", "b"]}),
             "validation": lambda: _reviews([1, 0], extra={"title": ["c", "d"]})}, STARS,
            "which columns are the text? (its string columns: review, title)"),
        "NaN score": ({"train": lambda: _reviews([0.5, float("nan")]), "validation": lambda: _reviews([1.0, 2.0])},
                      STARS, "score nan is not a finite number"),
        "three text columns": ({"train": ok, "validation": ok}, ["--text-columns", "a,b,c"],
                               "--text-columns: one or two column names"),
        "unknown task for its configurations": ({"train": ok, "validation": ok}, rte,
                                                "--task rte: nyu-mll/glue holds no such configuration (its "
                                                "configurations: cola)"),
    }


def arrow_files(dd, folder: Path) -> Path:
    """Each split of `dd` as an arrow stream file `folder/SPLIT.arrow` (an empty split too: its schema alone)."""
    import pyarrow as pa

    folder.mkdir(parents=True)
    for split, ds in dd.items():
        with pa.OSFile(str(folder / f"{split}.arrow"), "wb") as f, pa.ipc.new_stream(f, ds.data.schema) as out:
            out.write_table(ds.data.table)
    return folder


def write(folder: Path, name: str) -> tuple[list[str], dict[str, str], str]:
    """Case `name` written under `folder`: (the flags after the spec, the environment, the words of its error)."""
    import datasets

    splits, flags, words = variants()[name]
    home = folder / "home"
    env = {"HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"), "HF_DATASETS_CACHE": str(home / "datasets"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    dd = datasets.DatasetDict({split: make() for split, make in splits.items()})
    if name == "unknown task for its configurations":
        hub_cache(home, "nyu-mll/glue", dd, config="cola")
        where = "nyu-mll/glue"
    elif name == "empty split":  # arrow files, as the stream files datasets writes (SPLIT.arrow)
        where = str(arrow_files(dd, folder / "data"))
    else:
        dd.save_to_disk(str(folder / "data"))
        where = str(folder / "data")
    return ["--data", "hf", "--data-dir", where, "--out", str(folder / "run"), "--max-steps", "1", "--batch-size",
            "2", "--device", "cpu", *flags], env, words


def spec_file(folder: Path) -> str:
    path = folder / "text_spec.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(TEXT_SPEC))
    return str(path)


def hf_text_cases(folder: Path) -> list[tuple[str, str, list[str], dict[str, str]]]:
    """Every case, for tools/train.py: (name, entry, argv, env)."""
    spec = spec_file(folder)
    cases = []
    for i, name in enumerate(variants()):
        argv, env, _ = write(folder / str(i), name)
        cases.append((f"hf text: {name}", "train", [spec, *argv], env))
    return cases
