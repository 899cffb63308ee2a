"""--data hf's resolver (issue 61, the contract of vspec/train/data/hf.py): a save_to_disk folder, parquet files
named as the Hub names them, a glob, one file and a Hub cache filled here all open to the rows written with
`datasets` itself; the split names are Hugging Face's; the image and label columns are found from the features;
the registry serves the set to both modalities. Nothing is downloaded: the Hub is offline, every cache in tmp."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli_corpus import Case, run_corpus
from tests.helpers.hf_corpus import hf_cases
from tests.helpers.hf_data import HASH, hub_cache, offline, parquet
from tests.helpers.image_runs import env
from vspec.train.data import hf
from vspec.train.data.registry import DataError, entry, help_text, names

datasets = pytest.importorskip("datasets")  # the `hf` extra, which `make test` installs


@pytest.fixture
def home(monkeypatch, tmp_path) -> Path:
    return offline(monkeypatch, tmp_path)


def small(n_train: int = 6, n_val: int = 3, classes=("ant", "bee", "cat")):
    """A DatasetDict of `n` rows a split: PNG-like bytes (not decoded here), labels i % 3."""
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=list(classes))})

    def split(n, tag):
        return datasets.Dataset.from_dict({"image": [{"bytes": f"{tag}{i}".encode(), "path": None} for i in range(n)],
                                           "label": [i % len(classes) for i in range(n)]}, features=features)

    return datasets.DatasetDict(train=split(n_train, "t"), validation=split(n_val, "v"))


def rows(ds) -> list[tuple[bytes, int]]:
    ds = ds.cast_column("image", datasets.Image(decode=False))
    return [(r["image"]["bytes"], r["label"]) for r in ds]


WRITTEN = {"train": [(f"t{i}".encode(), i % 3) for i in range(6)], "validation": [(f"v{i}".encode(), i % 3)
                                                                                   for i in range(3)]}


def test_a_saved_folder_parquet_files_a_glob_and_one_file_open_to_the_rows_written(tmp_path, home):
    dd = small()
    dd.save_to_disk(str(tmp_path / "dict"))
    dd["train"].save_to_disk(str(tmp_path / "one"))
    parquet(dd, tmp_path / "pq")
    for where in (tmp_path / "dict", tmp_path / "pq", tmp_path / "pq/data/*.parquet"):
        opened = hf.open_splits(str(where))
        assert {split: rows(ds) for split, ds in opened.items()} == WRITTEN, where
    assert {s: rows(ds) for s, ds in hf.open_splits(str(tmp_path / "one")).items()} == {"train": WRITTEN["train"]}
    file = tmp_path / "pq/data/validation-00001-of-00002.parquet"
    assert {s: rows(ds) for s, ds in hf.open_splits(str(file)).items()} == {"validation": WRITTEN["validation"][2:]}
    assert list(hf.open_splits(str(tmp_path / "pq"), splits=["validation"])) == ["validation"]
    with pytest.raises(DataError, match=r"^hf: .* has no split 'test'; its splits: train, validation$"):
        hf.open_splits(str(tmp_path / "pq"), splits=["test"])
    # the saved arrow files are read where they are; parquet is converted into datasets' cache, here under tmp
    assert [f["filename"] for f in hf.open_splits(str(tmp_path / "dict"))["train"].cache_files] == [
        str(tmp_path / "dict/train/data-00000-of-00001.arrow")]
    assert all(Path(f["filename"]).is_relative_to(home / "datasets")
               for f in hf.open_splits(str(tmp_path / "pq"))["train"].cache_files)


def test_split_files_lists_each_split_s_files_in_order(tmp_path, home):
    dd = small()
    dd.save_to_disk(str(tmp_path / "dict"))
    parquet(dd, tmp_path / "pq", shards=2)
    assert hf.split_files(str(tmp_path / "dict")) == {s: [str(tmp_path / "dict" / s / "data-00000-of-00001.arrow")]
                                                      for s in ("train", "validation")}
    assert hf.split_files(str(tmp_path / "pq")) == {s: [str(tmp_path / f"pq/data/{s}-0000{i}-of-00002.parquet")
                                                        for i in range(2)] for s in ("train", "validation")}


@pytest.mark.parametrize("name, split", [
    ("data/train-00000-of-00002.parquet", "train"), ("data/validation_matched-00000-of-00001.parquet",
                                                     "validation_matched"),
    ("test.arrow", "test"), ("dev.parquet", "validation"), ("valid/0000.parquet", "validation"),
    ("my_test_1.parquet", "test"), ("evaluation-part.parquet", "test"), ("training/0.parquet", "train"),
    ("whatever.parquet", "train"), ("contest.parquet", "train"), ("data-00000-of-00001.arrow", "train"),
])
def test_a_file_s_split_is_named_as_hugging_face_names_it(tmp_path, name, split):
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_bytes(b"x")  # named only: not read
    assert hf.split_files(str(tmp_path)) == {split: [str(tmp_path / name)]}


def test_a_hub_dataset_is_read_from_the_local_cache_only(home):
    snapshot = hub_cache(home, "someone/pets", small())
    assert {s: rows(ds) for s, ds in hf.open_splits("someone/pets").items()} == WRITTEN
    assert hf.split_files("someone/pets")["train"] == [str(snapshot / "data/train-00000-of-00001.parquet")]
    for config in ("rte", "cola"):  # nyu-mll/glue's shape: a folder a configuration
        hub_cache(home, "org/glue", small(4, 2), config=config)
    assert hf.split_files("org/glue", "rte") == {s: [str(home / f"hub/datasets--org--glue/snapshots/{HASH}/rte/"
                                                            f"{s}-00000-of-00001.parquet")] for s in ("train",
                                                                                                      "validation")}
    with pytest.raises(DataError, match="^hf: org/glue holds the configurations cola, rte: name one with --subset"):
        hf.split_files("org/glue")
    with pytest.raises(DataError, match=r"^hf: --subset 'mnli': org/glue holds no such configuration \(its "
                                        r"configurations: cola, rte\)$"):
        hf.split_files("org/glue", "mnli")
    with pytest.raises(DataError) as e:
        hf.open_splits("someone/absent")
    assert str(e.value) == (
        f"hf: someone/absent: no such file or folder, and no Hub dataset of that id in the cache {home / 'hub'} "
        "(nothing is downloaded; fill it on a machine with network: hf download --repo-type dataset someone/absent "
        "(with HF_HUB_CACHE or HF_HOME pointing at this cache), or "
        "datasets.load_dataset('someone/absent').save_to_disk(DIR) and --data-dir DIR)")
    (home / "hub/datasets--someone--pets/refs/main").write_bytes(b"\x1b[2J not a hash")
    with pytest.raises(DataError, match=r"refs/main: holds no commit hash; the cache is damaged"):
        hf.split_files("someone/pets")


def features(**columns):
    return datasets.Features({k: v for k, v in columns.items()})


def test_the_image_and_label_columns_are_found_from_the_features():
    Image, ClassLabel, Value = datasets.Image, datasets.ClassLabel, datasets.Value
    names = ClassLabel(names=["a", "b"])
    assert hf.image_columns(features(img=Image(), y=names, id=Value("int64"))) == ("img", "y", ["a", "b"])
    assert hf.image_columns(features(img=Image(), label=Value("int16"))) == ("img", "label", None)
    assert hf.image_columns(features(a=Image(), b=Image(), y=names), "b", None) == ("b", "y", ["a", "b"])
    assert hf.image_columns(features(img=Image(), y=names, k=Value("uint8")), None, "k") == ("img", "k", None)
    for given, message in [
        ((features(a=Image(), b=Image(), y=names),), r"^hf: several Image columns \(a \(Image\), b \(Image\), y "
                                                     r"\(ClassLabel\)\): name one with --image-column NAME$"),
        ((features(text=Value("string"), y=names),), r"^hf: no Image columns \(text \(string\), y \(ClassLabel\)\): "
                                                     r"an image set needs one; --image-column NAME$"),
        ((features(img=Image(), y=names, z=names),), r"^hf: several ClassLabel columns"),
        ((features(img=Image(), id=Value("int64")),), r"^hf: no label column: no ClassLabel feature and no column "
                                                      r"'label'"),
        ((features(img=Image(), label=Value("float32")),), r"^hf: label column 'label': holds float32, not class "
                                                           r"labels"),
        ((features(img=Image(), y=names), "y"), r"^hf: --image-column y: holds ClassLabel, not images"),
        ((features(img=Image(), y=names), None, "nope"), r"^hf: --label-column 'nope': no such column; the columns: "
                                                         r"img \(Image\), y \(ClassLabel\)$"),
    ]:
        with pytest.raises(DataError, match=message):
            hf.image_columns(*given)


def test_the_registry_serves_hf_to_images_and_text():
    found = entry("hf")
    assert "hf" in names("image") and "hf" in names("text") and found.modalities == ("image", "text")
    assert found.loader == "vspec.train.data.hf_images:hf_images" and found.text_loader == "vspec.train.text.hf:hf_text"
    assert {"data_dir", "subset", "image_column", "label_column", "val_split"} <= set(found.decides)
    assert "hf (a Hugging Face dataset" in help_text() and "for a text body: hf (as above)" in help_text()
    with pytest.raises(DataError, match=r"^--data digits: holds no text data \(it serves image\)$"):
        entry("digits").load("text")


def test_hf_s_options_are_refused_for_other_sets():
    from vspec.train import ConfigError, DataConfig

    assert DataConfig("hf", data_dir="d", image_column="img", val_split="test").val_split == "test"
    for option in ("subset", "image_column", "label_column", "val_split"):
        with pytest.raises(ConfigError, match=f"^{option}: for --data hf, not imagefolder$"):
            DataConfig("imagefolder", data_dir="d", **{option: "x"})


def test_the_help_lists_hf_and_reading_no_dataset_imports_neither_datasets_nor_pyarrow():
    """`vspec train --help` lists the set and its flags; importing vspec, the command and the training engine
    imports neither `datasets` nor `pyarrow` (the `hf` extra, imported when a dataset is read)."""
    code = ("import sys, vspec, vspec.train.engine; from vspec.cli.train import train_parser; "
            "h = ' '.join(train_parser().format_help().split()); "
            "print('datasets' in sys.modules, 'pyarrow' in sys.modules, 'hf (a Hugging Face dataset' in h, "
            "all(f in h for f in ('--subset', '--image-column', '--label-column', '--val-split')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env())
    assert done.returncode == 0 and done.stdout.split() == ["False", "False", "True", "True"], done.stderr[-2000:]


def test_every_malformed_dataset_is_one_line_naming_what_is_wrong(tmp_path):
    """tests/helpers/hf_corpus.py's cases through tools/train.py: one line on stderr holding the case's words,
    exit 2, no traceback or hang, and no loading script run (its marker file never appears)."""
    cases = hf_cases(tmp_path)
    results = run_corpus(tmp_path, [Case(name, argv, env, entry, marker=marker)
                                    for name, entry, argv, env, marker, _ in cases])
    assert len(results) == len(cases) >= 40
    bad = [(case.name, outcome.code, outcome.stderr[-400:]) for (case, outcome), (*_, words) in zip(results, cases)
           if not outcome.clean or words not in outcome.stderr]
    assert bad == []
    markers = [case.marker for case, _ in results if case.marker]
    assert len(markers) == 2 and not any(os.path.lexists(m) for m in markers)


def test_a_pattern_or_a_folder_of_too_many_files_is_refused_while_listed(tmp_path, monkeypatch):
    """The bounds hold while the names are listed (a glob is expanded lazily and stopped): a pattern of millions,
    at a bound of 3 here. Braces are refused unexpanded."""
    for i in range(5):
        (tmp_path / "data" / f"train-{i:05d}-of-00005.parquet").parent.mkdir(exist_ok=True)
        (tmp_path / "data" / f"train-{i:05d}-of-00005.parquet").write_bytes(b"x")
    assert len(hf.split_files(str(tmp_path / "data/*.parquet"))["train"]) == 5
    monkeypatch.setattr(hf, "MAX_FILES", 3)
    with pytest.raises(DataError, match=r"data/\*\.parquet' matches more than 3 data files"):
        hf.split_files(str(tmp_path / "data/*.parquet"))
    with pytest.raises(DataError, match=r": more than 3 data files or 1,000,000 names under it"):
        hf.split_files(str(tmp_path))
    with pytest.raises(DataError, match=r"braces are not expanded"):
        hf.split_files(str(tmp_path / "data/train-{00000..99999}-of-00005.parquet"))
