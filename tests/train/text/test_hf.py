"""Text from Hugging Face datasets (issue 61, item 2): a GLUE task read from a save_to_disk folder, parquet files or
the Hub cache's `nyu-mll/glue` gives the TSV reader's very examples (MNLI's other class order, CoLA's named digits,
STS-B's scores), so `bert_base_sot_rte` trains to the same figures and weights from either; any text classification
set by its columns (`--text-columns`, `--label-column`: classes or scores); and malformed sets refused in one line
(tests/helpers/hf_text_corpus.py). Every dataset is written here with `datasets`, offline."""

import json

import pytest
import torch

from tests.helpers import hf_data
from tests.helpers.hf_text import hub_dataset, rows, tsv_folder
from tests.helpers.hf_text_corpus import spec_file, variants, write
from tests.helpers.text_runs import records
from vspec.cli.eval import main as eval_main
from vspec.cli.train import main as train_main
from vspec.train import checkpoints
from vspec.train.config import DataConfig
from vspec.train.data.registry import Request
from vspec.train.text.readers import read_glue
from vspec.train.validators import ConfigError

pytest.importorskip("datasets")
pytest.importorskip("tokenizers")
TIMINGS = ("samples_per_s", "epoch_time_s")
SHRUNK = {"depth": 1, "dim": 32, "block.attention.heads": 2, "block.ffn.hidden": 64, "embedder.vocab_size": 120,
          "embedder.seq_len": 32, "embedder.max_positions": 64, "head.pool.m": 8, "head.pool.n": 8}


@pytest.fixture
def home(monkeypatch, tmp_path):
    """The Hub and datasets offline, their caches under tmp_path."""
    return hf_data.offline(monkeypatch, tmp_path)


def forms(tmp_path, home, task: str, train: list, val: list) -> dict[str, list[str]]:
    """The rows as GLUE's TSV folder and as the Hub's GLUE task saved three ways: the flags that read each."""
    tsv = tsv_folder(tmp_path / "tsv", task, train, val)
    dd = hub_dataset(task, train, val, test=4)  # and GLUE's unlabelled test split, never read by default
    dd.save_to_disk(str(tmp_path / "disk"))
    hf_data.parquet(dd, tmp_path / "parquet", shards=2)
    hf_data.hub_cache(home, "nyu-mll/glue", dd, config=task)
    return {"tsv": ["--data", "glue", "--data-dir", str(tsv)],
            **{form: ["--data", "hf", "--data-dir", where] for form, where in (
                ("disk", str(tmp_path / "disk")), ("parquet", str(tmp_path / "parquet")), ("hub", "nyu-mll/glue"))}}


@pytest.mark.parametrize("task", ["rte", "mnli", "cola", "stsb"])
def test_a_glue_task_from_hugging_face_is_the_tsv_readers_examples(tmp_path, home, task):
    from vspec.train.text.hf import hf_text

    train, val = rows(task, 12), rows(task, 6, seed=1)
    read = forms(tmp_path, home, task, train, val)
    tsv = read.pop("tsv")[-1]
    want = read_glue(tsv, task, "train"), read_glue(tsv, task, "validation")
    assert len(want[0]) == 12 and len({e.label for e in want[0]}) > 1
    for form, flags in read.items():
        got = hf_text(Request(data_dir=flags[-1], task=task))
        assert got == (*want, task), form
    if task == "mnli":  # the Hub's other validation split, by its name
        got = hf_text(Request(data_dir=str(tmp_path / "disk"), task=task, split="validation_mismatched"))
        assert got[1] == read_glue(tsv, task, "validation_mismatched") != want[1]


def _train(out, data_flags, *extra) -> int:
    sets = [a for k, v in SHRUNK.items() for a in ("--set", f"{k}={v}")]
    return train_main(["bert_base_sot_rte", *sets, *data_flags, "--task", "rte", "--out", str(out), "--recipe", "glue",
                       "--lr", "1e-3", "--epochs", "2", "--batch-size", "8", "--device", "cpu", "--seed", "1",
                       *extra])


def _figures(out) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in records(out)]


def test_bert_base_sot_rte_trains_on_an_hf_glue_dataset_as_on_its_tsv_files(tmp_path, home, capsys):
    """The same rows as TSV files, a save_to_disk folder, parquet files and the Hub cache: the same per-epoch losses
    and metrics, the same weights; two identical runs bit-identical; `vspec eval` reads the Hub id again."""
    read = forms(tmp_path, home, "rte", rows("rte", 48), rows("rte", 16, seed=1))
    outs = {form: tmp_path / "runs" / form for form in read}
    for form, flags in read.items():
        assert _train(outs[form], flags) == 0, capsys.readouterr().err
    assert _train(tmp_path / "runs" / "again", read["disk"]) == 0
    want = _figures(outs["tsv"])
    assert [r["epoch"] for r in want] == [1, 2] and {"train_loss", "val_loss", "val_accuracy"} <= want[0].keys()
    weights = checkpoints.load(outs["tsv"] / "last.pt")["state_dict"]
    for out in [*outs.values(), tmp_path / "runs" / "again"]:
        assert _figures(out) == want, out.name
        other = checkpoints.load(out / "last.pt")["state_dict"]
        assert other.keys() == weights.keys() and all(torch.equal(other[k], weights[k]) for k in weights)
    capsys.readouterr()
    assert eval_main([str(outs["hub"] / "last.pt"), "--data", "hf", "--data-dir", "nyu-mll/glue", "--task", "rte",
                      "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["task"] == "rte" and result["samples"] == 16
    assert result["metrics"]["accuracy"] == pytest.approx(want[-1]["val_accuracy"], abs=1e-12)


def _reviews(folder, labels, label_feature=None, extra=None):
    """A review set of its own shape (`review`, `stars`, and `extra` string columns), train and validation."""
    import datasets

    features = {"review": datasets.Value("string"), **{k: datasets.Value("string") for k in extra or {}}}
    if label_feature is not None:
        features["stars"] = label_feature
    texts = ["a witty moving film", "a dull flat plot", "fine acting", "an awful story"]
    table = {"review": [texts[i % 4] for i in range(len(labels))], **(extra or {}), "stars": labels}
    declared = datasets.Features(features) if label_feature is not None else None
    dd = datasets.DatasetDict({split: datasets.Dataset.from_dict(table, features=declared)
                               for split in ("train", "validation")})
    dd.save_to_disk(str(folder))
    return str(folder)


def test_a_text_classification_set_of_its_own_columns(tmp_path, home):
    """Without --task: the classes a ClassLabel's names (its one string column the text), integers as the class
    indices, strings sorted as run_glue.py sorts them, floats a regression (decided by the feature's type)."""
    import datasets

    from vspec.train.text.hf import hf_text

    names = datasets.ClassLabel(names=["one", "two", "three"])
    train, _, task = hf_text(Request(data_dir=_reviews(tmp_path / "a", [2, 0, 1, 2], names)))
    assert [e.label for e in train] == [2, 0, 1, 2] and (task.labels, task.metric, task.a, task.b) == (
        ("one", "two", "three"), "accuracy", "review", None)
    where = _reviews(tmp_path / "b", [3, 0, 0, 1])
    train, _, task = hf_text(Request(data_dir=where, label_column="stars"))
    assert [e.label for e in train] == [3, 0, 0, 1] and task.labels == ("0", "1", "2", "3")
    where = _reviews(tmp_path / "c", ["pos", "neg", "pos", "neg"], extra={"title": ["t"] * 4})
    train, _, task = hf_text(Request(data_dir=where, label_column="stars", text_columns="title,review"))
    assert [(e.a, e.b, e.label) for e in train[:2]] == [("t", "a witty moving film", 1), ("t", "a dull flat plot", 0)]
    assert task.labels == ("neg", "pos")
    train, _, task = hf_text(Request(data_dir=_reviews(tmp_path / "d", [4.5, 1.0, 3.25, 0.0]),
                                     label_column="stars"))
    assert [e.label for e in train] == [4.5, 1.0, 3.25, 0.0] and (task.labels, task.metric) == (None, "pearson")


def test_an_own_set_trains_resumes_finished_and_evaluates(tmp_path, home, capsys):
    """A regression set of its own trains with Pearson's correlation as its headline; a finished run resumed
    writes its missing summary (its score read from its records, the data unread; --text-columns kept in its
    checkpoint); eval names the task."""
    where = _reviews(tmp_path / "scores", [float(i % 5) for i in range(24)])
    spec, out = spec_file(tmp_path), tmp_path / "run"
    argv = [spec, "--data", "hf", "--data-dir", where, "--text-columns", "review", "--label-column", "stars", "--out",
            str(out), "--epochs", "1", "--batch-size", "8", "--device", "cpu"]
    assert train_main(argv) == 0
    assert "val_pearson" in records(out)[0] and checkpoints.load(out / "last.pt")["best_score"] == pytest.approx(
        records(out)[0]["val_pearson"])
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").unlink()  # a kill before the end files: a resume writes them, its score unread
    capsys.readouterr()
    assert train_main([*argv, "--resume"]) == 0 and "wrote its missing summary.json" in capsys.readouterr().out
    assert json.loads((out / "summary.json").read_text())["score"] == summary["score"] == "val_pearson"
    assert eval_main([str(out / "last.pt"), "--data", "hf", "--data-dir", where, "--label-column", "stars",
                      "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["task"] == "regression"


def test_text_columns_are_an_hf_option():
    assert DataConfig("hf", text_columns="premise, hypothesis").text_columns == ("premise", "hypothesis")
    for kwargs, words in [({"name": "glue", "text_columns": "a"}, "for --data hf, not glue"),
                          ({"name": "hf", "text_columns": "a,a"}, "two different columns"),
                          ({"name": "hf", "text_columns": ""}, "one or two column names")]:
        with pytest.raises(ConfigError, match=words):
            DataConfig(**kwargs)


@pytest.mark.parametrize("name", list(variants()))
def test_malformed_hf_text_is_one_line(tmp_path, monkeypatch, capsys, name):
    argv, env, words = write(tmp_path, name)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    capsys.readouterr()  # datasets' progress bars, writing
    assert train_main([spec_file(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err
