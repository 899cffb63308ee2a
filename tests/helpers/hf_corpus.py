"""Malformed Hugging Face datasets for --data hf (issue 61, item 5), the corpus's classes drawn like
tests/helpers/shard_corpus.py's: parquet files whose schema lies or lacks a column, labels out of range, negative,
float or missing, bytes that are no image, corrupt arrow and parquet files, save_to_disk folders whose
dataset_info.json, state.json or dataset_dict.json lie, data files that are FIFOs, devices or links to nothing,
patterns of millions of names, loading scripts (never run: each would create its marker file), empty splits and
a damaged Hub cache. Each case is (name, entry, argv, env, marker, words): tools/train.py's argv with the Hub and
datasets offline and their caches in the corpus's folder (env), the file a loading script would create (None where
none is there) and what the one line must say (tests/train/data/test_hf.py checks the words; the corpus, the rest).
"""

from __future__ import annotations

import io
import json
import os
import random
from collections.abc import Callable
from pathlib import Path

from tests.helpers.data_corpus import SPECIAL, special_file

SPEC = {"embedder": {"kind": "patch", "patch_size": 4}, "block": {"attention": {"kind": "mhsa", "heads": 2}},
        "depth": 1, "dim": 16, "img_size": 8, "in_chans": 3, "num_classes": 3}
SCRIPT = "import pathlib\npathlib.Path({marker!r}).touch()\n"  # a loading script: it would leave its marker


def _png(value: int) -> bytes:
    import numpy as np
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def good(labels=None, images=None, label_type=None):
    """A DatasetDict of 6 training and 3 validation PNGs, a ClassLabel of 3 classes (or `label_type`)."""
    import datasets

    label = label_type or datasets.ClassLabel(names=["a", "b", "c"])
    features = datasets.Features({"image": datasets.Image(), "label": label})

    def split(n: int, offset: int):
        rows = list(range(offset, offset + n))
        return datasets.Dataset.from_dict(
            {"image": [{"bytes": (images or {}).get(i, _png(10 * i)), "path": None} for i in rows],
             "label": [(labels or {}).get(i, i % 3) for i in rows]}, features=features)

    return datasets.DatasetDict(train=split(6, 0), validation=split(3, 6))


def _parquet(dd, folder: Path) -> None:
    for split, ds in dd.items():
        (folder / "data").mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(folder / "data" / f"{split}-00000-of-00001.parquet"))


def _edit_json(path: Path, change: Callable[[dict], object]) -> None:
    value = json.loads(path.read_text())
    change(value)
    path.write_text(json.dumps(value))


def _lying_schema(folder: Path) -> None:
    """The train file's schema metadata says its label column holds images."""
    import pyarrow.parquet as pq

    path = folder / "data" / "train-00000-of-00001.parquet"
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[b"huggingface"])
    meta["info"]["features"]["label"] = {"_type": "Image"}
    pq.write_table(table.replace_schema_metadata({b"huggingface": json.dumps(meta).encode()}), path)


def _without(column: str) -> Callable[[Path], None]:
    return lambda folder: _parquet(good().remove_columns(column), folder)


def variants(rng: random.Random) -> dict[str, tuple[Callable[[Path], None], str, str]]:
    """Ways to make a dataset no run can use, each (a function that fills a fresh folder `d`, the --data-dir to give
    (`{d}`; `{marker}` the loading script's marker), words its one line must hold)."""
    import datasets

    ints = datasets.Value("int64")
    out: dict[str, tuple[Callable[[Path], None], str, str]] = {
        "hf schema: a parquet file's features lie": (lambda d: (_parquet(good(), d), _lying_schema(d)), "{d}",
                                                      "its schema's features say label is Image"),
        "hf schema: no label column": (_without("label"), "{d}", "no label column"),
        "hf schema: no image column": (_without("image"), "{d}", "no Image columns"),
        "hf schema: a float label column": (lambda d: _parquet(good(label_type=datasets.Value("float32")), d), "{d}",
                                            "holds float32, not class labels"),
        "hf labels: out of range": (lambda d: _info_says_classes(good({2: 7}, label_type=ints), d), "{d}",
                                    "train row 2: label 7 is out of range"),
        "hf labels: negative": (lambda d: good({4: -1}).save_to_disk(str(d)), "{d}", "train row 4: label -1 is "
                                                                                        "negative"),
        "hf labels: missing": (lambda d: good({1: None}).save_to_disk(str(d)), "{d}", "train row 1: no label"),
        "hf labels: an integer column over the training classes": (
            lambda d: _parquet(good({7: 9}, label_type=ints), d), "{d}", "validation row 1: label 9 is out of range"),
        # read when validation reads it (the first step reads 2 of the 6 training images)
        "hf images: bytes of no image": (lambda d: good(images={7: b"<html>not an image</html>"}).save_to_disk(
            str(d)), "{d}", "validation row 1: not an image file PIL reads"),
        "hf images: random bytes": (lambda d: good(images={8: rng.randbytes(64)}).save_to_disk(str(d)), "{d}",
                                    "validation row 2: not an image"),
        "hf files: a random arrow file": (lambda d: _saved_then(d, lambda a: a.write_bytes(rng.randbytes(256)))
                                          , "{d}", "not a readable save_to_disk folder"),
        "hf files: a truncated arrow file": (lambda d: _saved_then(d, lambda a: a.write_bytes(a.read_bytes()[:100])),
                                             "{d}", "not a readable save_to_disk folder"),
        "hf files: loose arrow files of random bytes": (lambda d: (d.mkdir(), *(
            (d / f"{s}.arrow").write_bytes(rng.randbytes(300)) for s in ("train", "validation"))), "{d}/*.arrow",
            "train.arrow: not an arrow stream file"),
        "hf files: a truncated parquet file": (lambda d: _parquet_then(d, lambda p: p.write_bytes(
            p.read_bytes()[:200])), "{d}", "not a parquet file"),
        "hf files: a parquet file of random bytes": (lambda d: _parquet_then(d, lambda p: p.write_bytes(
            rng.randbytes(500))), "{d}", "not a parquet file"),
        "hf files: an empty parquet file": (lambda d: _parquet_then(d, lambda p: p.write_bytes(b"")), "{d}",
                                            "is empty"),
        "hf saved: dataset_info.json says the label is an image": (lambda d: _saved_json(d, "dataset_info.json", (
            lambda i: i["features"].__setitem__("label", {"_type": "Image"}))), "{d}", "not a readable save_to_disk"),
        "hf saved: state.json lists a file outside the folder": (lambda d: _saved_json(d, "state.json", (
            lambda s: s["_data_files"][0].__setitem__("filename", "../../validation/data-00000-of-00001.arrow"))),
            "{d}", "not an arrow file's name in"),
        "hf saved: state.json lists a missing file": (lambda d: _saved_json(d, "state.json", (
            lambda s: s["_data_files"].append({"filename": "data-00001-of-00001.arrow"}))), "{d}", "cannot be read"),
        "hf saved: state.json's files are a string": (lambda d: _saved_json(d, "state.json", (
            lambda s: s.__setitem__("_data_files", "data.arrow"))), "{d}", "are not a list of files"),
        "hf saved: state.json nested 100,000 deep": (
            lambda d: _saved_then(d, lambda a: (a.parent / "state.json").write_text("[" * 100_000 + "]" * 100_000)),
            "{d}", "not the JSON of a saved Dataset's state"),
        "hf saved: state.json of 100 MiB": (lambda d: _saved_then(d, lambda a: os.truncate(
            a.parent / "state.json", 100 << 20)), "{d}", "more than such a file holds"),
        "hf saved: dataset_dict.json names a split with no folder": (lambda d: (good().save_to_disk(str(d)), _edit_json(
            d / "dataset_dict.json", lambda j: j["splits"].append("test"))), "{d}", "lists the split test, which has "
                                                                                    "no folder"),
        "hf saved: dataset_dict.json's splits name other folders": (lambda d: (good().save_to_disk(str(d)), _edit_json(
            d / "dataset_dict.json", lambda j: j.__setitem__("splits", ["../x"]))), "{d}", "are not a list of split "
                                                                                        "names"),
        "hf splits: an empty validation split": (lambda d: _empty_validation(d), "{d}", "validation: the split has no "
                                                                                       "rows"),
        "hf splits: no validation split": (lambda d: good()["train"].save_to_disk(str(d)), "{d}",
                                           "no validation split"),
        "hf pattern: braces of 10**6 names": (lambda d: _parquet(good(), d),
                                              "{d}/data/train-{{000000..999999}}-of-00001.parquet",
                                              "braces are not expanded"),
        "hf pattern: a glob that matches nothing": (lambda d: _parquet(good(), d), "{d}/nothing-*.parquet",
                                                    "matches no parquet or arrow file"),
        "hf script: a loading script and no data files": (lambda d: _script(d, "pets.py", marker(d)), "{d}",
                                                          "vspec never runs a dataset's code"),
        "hf script: a loading script in the Hub cache": (lambda d: _script(_snapshot(d / "home", "owner/script", False),
                                                                           "script.py", marker(d)),
                                                         "owner/script", "vspec never runs a dataset's code"),
        "hf hub: not in the cache": (lambda d: None, "owner/absent", "no Hub dataset of that id in the cache"),
        "hf hub: refs/main holds no hash": (lambda d: (_snapshot(d / "home", "owner/pets"), (
            d / "home/hub/datasets--owner--pets/refs/main").write_bytes(rng.randbytes(40))), "owner/pets",
            "holds no commit hash"),
    }
    for kind in SPECIAL:
        out[f"hf files: a parquet file is {kind}"] = (  # a folder is no file: train has none then
            lambda d, kind=kind: _parquet_then(d, lambda p: (p.unlink(), special_file(p, kind))), "{d}",
            "no train split" if kind == "folder" else "data/train-00000-of-00001.parquet")
        out[f"hf hub: refs/main is {kind}"] = (lambda d, kind=kind: _special_ref(d / "home", kind), "owner/pets",
                                               "refs/main")
    return out


def _info_says_classes(dd, folder: Path) -> None:
    """`dd` saved with integer labels, its dataset_info.json then saying ClassLabel of 3 names."""
    dd.save_to_disk(str(folder))
    for split in dd:
        _edit_json(folder / split / "dataset_info.json", lambda i: i["features"].__setitem__(
            "label", {"names": ["a", "b", "c"], "_type": "ClassLabel"}))


def _saved_then(folder: Path, damage: Callable[[Path], object]) -> None:
    good().save_to_disk(str(folder))
    damage(folder / "train" / "data-00000-of-00001.arrow")


def _saved_json(folder: Path, name: str, change: Callable[[dict], object]) -> None:
    good().save_to_disk(str(folder))
    _edit_json(folder / "train" / name, change)


def _parquet_then(folder: Path, damage: Callable[[Path], object]) -> None:
    _parquet(good(), folder)
    damage(folder / "data" / "train-00000-of-00001.parquet")


def _empty_validation(folder: Path) -> None:
    dd = good()
    dd["validation"] = dd["validation"].filter(lambda row: False)
    dd.save_to_disk(str(folder))


def marker(case: Path) -> Path:
    """The file a loading script of the case in folder `case` would create, were it run."""
    return case.parent / f"{case.name}.ran"


def _script(folder: Path, name: str, ran: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(SCRIPT.format(marker=str(ran)))
    (folder / "README.md").write_text("a dataset with a loading script\n")
    return folder


def _snapshot(home: Path, repo: str, data: bool = True) -> Path:
    """A Hub cache under `home` holding `repo`'s snapshot, refs/main naming it: the good parquet files, or with
    `data` False none."""
    commit = "0" * 40
    root = home / "hub" / f"datasets--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    (root / "snapshots" / commit).mkdir(parents=True)
    if data:
        _parquet(good(), root / "snapshots" / commit)
    return root / "snapshots" / commit


def _special_ref(home: Path, kind: str) -> None:
    _snapshot(home, "owner/pets")
    ref = home / "hub" / "datasets--owner--pets" / "refs" / "main"
    ref.unlink()
    special_file(ref, kind)


def hf_cases(folder: Path, seed: int = 0) -> list[tuple[str, str, list[str], dict[str, str], str | None, str]]:
    """Every variant on a fresh folder `cases/i` (its HF_HOME `cases/i/home`, where a Hub case fills its cache),
    given to tools/train.py --data hf: (name, entry, argv, env, marker, words)."""
    import datasets

    rng = random.Random(seed)
    datasets.disable_progress_bars()
    spec = folder / "spec.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps(SPEC))
    cases = []
    for i, (name, (make, data_dir, words)) in enumerate(variants(rng).items()):
        d = folder / "cases" / str(i)
        make(d)
        home = d / "home" if " hub" in name or "Hub" in name else folder / "homes" / str(i)
        env = {"HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"), "HF_DATASETS_CACHE": str(home / "datasets"),
               "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        argv = [str(spec), "--data", "hf", "--data-dir", data_dir.format(d=d), "--out", str(folder / "runs" / str(i)),
                "--batch-size", "2", "--device", "cpu", "--max-steps", "1", "--epochs", "1", "--warmup-epochs", "0"]
        cases.append((f"{name} #{i}", "train", argv, env, str(marker(d)) if "script" in name else None, words))
    return cases
