"""Data sets as a table and a validated training configuration (issue 45, items 3 and 4): the toy family in tests/
adds a data set with no edit under vspec/ (its `datasets.py`), found by `vspec train --data` and the Python API;
`register_dataset` adds one from any code; every configuration field refuses a bad value in one line naming it, the
same line (worded by flag) from the command line; what a checkpoint records of the data is what it always was."""

import json
from pathlib import Path

import pytest

import vspec
import vspec.cli
from vspec import train
from vspec.spec import families
from vspec.train import checkpoints
from vspec.train.data import registry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def toy():
    vspec.register_family("tests.toy_family")  # tests/ is a package of the checkout
    yield
    families.unregister_family("tests.toy_family")
    registry.unregister_dataset("stripes")
    assert "stripes" not in registry.names()


def test_the_toy_familys_data_set_is_in_the_table_and_the_help(toy):
    entry = registry.table()["stripes"]
    assert (entry.modality, entry.metrics, entry.folder, entry.decides) == ("image", ("top1",), False, ())
    assert "stripes" in registry.names("image") and "stripes" not in registry.names("text")
    assert "stripes (the toy family's bars, 2 classes)" in registry.help_text()
    from vspec.cli.train import train_parser

    data = next(a for a in train_parser()._actions if a.dest == "data")
    assert "stripes" in data.choices and "stripes (the toy family's bars" in data.help


def test_it_trains_through_the_api_and_the_command_line(toy, tmp_path, capsys):
    spec = vspec.create_model("toy_tiny").spec
    cfg = train.TrainConfig(spec, train.resolve("none", epochs=1, batch_size=16), "stripes",
                        train.RunConfig(out=tmp_path / "api", device="cpu", max_steps=2))
    final = train.run(cfg)
    assert final["step"] == 2 and 0 <= final["val_top1"] <= 100
    assert "stripes has 2 classes; setting num_classes = 2" in capsys.readouterr().err
    assert json.loads((tmp_path / "api" / "summary.json").read_text())["epochs"] == 1
    code = vspec.cli.main(["train", "toy_tiny", "--data", "stripes", "--out", str(tmp_path / "cli"), "--epochs", "1",
                           "--batch-size", "16", "--max-steps", "2", "--device", "cpu"])
    assert code == 0, capsys.readouterr().err
    record = json.loads((tmp_path / "cli" / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["step"] == 2


def test_register_dataset_adds_one_and_refuses_a_taken_name():
    entry = train.DataSet("noise4", "image", "vspec.train.data.sources:synthetic", "random images again")
    try:
        assert train.register_dataset(entry) is entry and train.register_dataset(entry) is entry  # again: nothing
        assert train.DataConfig("noise4").name == "noise4"
        with pytest.raises(ValueError, match="^data set 'noise4' is registered already$"):
            train.register_dataset(train.DataSet("noise4", "text", "x:y", "another"))
        with pytest.raises(ValueError, match="^data set 'digits' is registered already$"):
            train.register_dataset(train.DataSet("digits", "image", "x:y", "another"))
    finally:
        registry.unregister_dataset("noise4")
    with pytest.raises(train.ConfigError, match="^name: unknown data set 'noise4'; expected one of digits, mnist5k"):
        train.DataConfig("noise4")
    with pytest.raises(ValueError, match="^DataSet.name: a printable word"):
        train.DataSet("two words", "image", "x:y", "")


@pytest.mark.parametrize("make,line", [
    (lambda: train.Recipe(epochs=-1), "epochs: must be in [1, 100000], got -1"),
    (lambda: train.resolve("none", lr=float("nan")), "lr: must be finite and > 0, got nan"),
    (lambda: train.Recipe(smoothing=1.0), "smoothing: must be finite and in [0, 1), got 1.0"),
    (lambda: train.Recipe(batch_size="64"), "batch_size: must be an int >= 1, got '64'"),
    (lambda: train.Recipe(schedule="step"), "schedule: must be one of cosine, linear, got 'step'"),
    (lambda: train.resolve("sota"), "recipe: unknown 'sota'; known: deit, dhvt_cifar, msf, refiner, refiner_advanced, "
                                   "none, compare, glue"),
    (lambda: train.RunConfig(seed=2**32), "seed: must be in [0, 2**32), got 4294967296"),
    (lambda: train.RunConfig(log_interval=float("inf")), "log_interval: must be finite and > 0, got inf"),
    (lambda: train.RunConfig(device="tpu"), "device: must be one of auto, cpu, cuda, got 'tpu'"),
    (lambda: train.RunConfig(init="bert"), "init: 'bert': hf:DIR (a Hugging Face checkpoint folder)"),
    (lambda: train.RunConfig(resume=True, overwrite=True), "resume: continues the run in out, overwrite replaces it"),
    (lambda: train.DataConfig("digits", max_len=8), "max_len: for a text data set (hf, rt-polarity, glue); digits "
                                                "holds images"),
    (lambda: train.DataConfig("glue", task="cola2"), "task: must be one of cola, sst2"),
    (lambda: train.DataConfig("digits", inputs=[0.5]), "inputs: must be dict or None, got [0.5]"),
    (lambda: train.TrainConfig(vspec.load_spec(ROOT / "specs/demo_digits.py"), {"epochs": 1}),
     "recipe: must be Recipe, got {'epochs': 1}"),
])
def test_every_field_refuses_a_bad_value_in_one_line(make, line):
    with pytest.raises(train.ConfigError) as e:
        make()
    assert str(e.value).startswith(line) and "\n" not in str(e.value)


def test_the_command_lines_refuse_with_the_same_validators_words(tmp_path, capsys):
    try:
        train.Recipe(epochs=-1)
    except train.ConfigError as e:
        words = e.message
    assert vspec.cli.main(["train", "demo_digits", "--out", str(tmp_path / "x"), "--epochs", "-1"]) == 2
    assert capsys.readouterr().err == f"vspec train: error: --epochs: {words}\n"
    assert vspec.cli.main(["compare", "demo_digits", "--epochs", "-1", "--out-dir", str(tmp_path / "c")]) == 2
    assert f"vspec compare: error: argument --epochs: {words} (see --help)" in capsys.readouterr().err


def test_the_data_a_checkpoint_records_is_unchanged():
    """What `data_args` writes into checkpoints, set by set, as before the table: earlier runs still resume."""
    spec = vspec.load_spec(ROOT / "specs/demo_digits.py")
    recipe, run = train.resolve("none"), train.RunConfig(seed=3)
    here = str(Path("d").resolve())
    expected = {
        "digits": {}, "mnist5k": {"data_dir": here}, "cifar10": {"data_dir": here}, "imagefolder": {"data_dir": here},
        "synthetic": {"synthetic_size": 1024},
        "rt-polarity": {"task": None, "max_len": 8, "tokenizer": None},
        "glue": {"data_dir": here, "task": "cola", "max_len": 8, "tokenizer": str(Path("tok").resolve())},
    }
    for name, args in expected.items():
        text = name in ("rt-polarity", "glue")
        data = train.DataConfig(name, data_dir="d", max_len=8 if text else None,
                                task="cola" if name == "glue" else None, tokenizer="tok" if name == "glue" else None)
        got = checkpoints.data_args(train.TrainConfig(spec, recipe, data, run))
        assert got == {"data": name, "seed": 3, **args}, name
