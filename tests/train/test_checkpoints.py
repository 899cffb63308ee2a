"""vspec/train/checkpoints.py, last.pt's one owner: its reader checks each record for the keys of the task the
checkpoint's spec trains (asked of the task, not guessed from the data set's name); a previous release's checkpoint
still loads."""

from pathlib import Path

import pytest
import torch

from vspec import load_spec, override, to_json
from vspec.train import checkpoints
from vspec.train.tasks import ImageTask, task_type
from vspec.weights.checkpoint import CheckpointError

OLD = Path(__file__).resolve().parents[1] / "data" / "v1" / "train_last.pt"  # an image run of the first release


def _edited(tmp_path: Path, **changes) -> Path:
    """The old checkpoint with fields replaced (it has no checksum, as that release wrote none)."""
    ckpt = torch.load(OLD, weights_only=True)
    assert not any("sha256" in k for k in ckpt)
    path = tmp_path / "last.pt"
    torch.save({**ckpt, **changes}, path)
    return path


def test_the_previous_release_loads_with_its_task_asked():
    ckpt = checkpoints.load(OLD, task_type)
    assert ckpt["epoch"] >= 1 and ckpt["best_score"] == ckpt["metrics"][-1]["val_top1"]  # best_top1, renamed
    assert ImageTask.record_keys == ("epoch", "train_loss", "val_loss", "val_top1", "val_top5")


@pytest.mark.parametrize("data", ["synthetic", "glue"])
def test_records_are_checked_for_the_keys_of_the_task_its_spec_trains(tmp_path, data):
    """An image model's records without val_top5: refused whatever the data set is called (a text set's name made
    them pass as a text run's before); without a task asked, the keys every task's records hold."""
    old = torch.load(OLD, weights_only=True)["metrics"]
    path = _edited(tmp_path, data=data, metrics=[{k: v for k, v in r.items() if k != "val_top5"} for r in old])
    with pytest.raises(CheckpointError, match=r"'metrics' record 0 is not a table of numbers with epoch, train_loss, "
                                              r"val_loss, val_top1, val_top5"):
        checkpoints.load(path, task_type)
    assert checkpoints.load(path)["metrics"][0]["val_top1"] == old[0]["val_top1"]


def test_a_refusal_shows_a_value_from_the_file_cut_to_40_characters(tmp_path):
    """Containers by type and length (they may hold themselves), anything else as its repr, 37 characters and
    "..." past 40."""
    for changes, says in [({"metrics": [[1.0, 2.0, 3.0]]}, "'metrics' record 0 is not a table .*: list of 3$"),
                          ({"epoch_loss": [1.0, 2.0, 3.0]}, "part-done epoch: list of 3$"),
                          ({"data_args": {"k" * 50: [1]}}, "'data_args' '" + "k" * 36 + r"\.\.\. is list, not"),
                          ({"data_args": {"seed": {}}}, "'data_args' 'seed' is dict, not")]:
        with pytest.raises(CheckpointError, match=says):
            checkpoints.load(_edited(tmp_path, **changes), task_type)


def test_a_different_run_is_listed_with_values_cut_to_40_characters(tmp_path):
    """check_resume's line: this run's value != the checkpoint's, each as written (strings) or as JSON, "(none)"
    where one side lacks the key, 37 characters and "..." past 40."""
    spec = override(load_spec("deit_tiny"), {"depth": 1, "img_size": [16, 16]})
    saved = {"data": "synthetic", "seed": 0, "data_dir": "/a", "tokenizer": "t"}
    now = {"data": "synthetic", "seed": 0, "data_dir": "/" + "d" * 60}
    with pytest.raises(CheckpointError) as e:
        checkpoints.check_resume({"spec": to_json(spec), "data_args": saved}, tmp_path / "last.pt",
                                 override(spec, {"img_size": [32, 32]}), now)
    shown = str(e.value).split("(this run != the checkpoint): ")[1].split("; resume")[0]
    expected = [f"--data-dir /{'d' * 36}... != /a", "--tokenizer (none) != t", "img_size [32, 32] != [16, 16]"]
    assert all(d in shown for d in expected) and len(shown) == len(", ".join(expected)), shown


def test_a_precision_other_than_the_runs_is_listed_and_auto_keeps_it(tmp_path):
    """--precision fp32 on resuming a bf16 run: listed like a flag of its data; auto (the checkpoint's) and the same
    precision pass, and a checkpoint that records none (an earlier release's) is compared on the rest alone."""
    spec = override(load_spec("deit_tiny"), {"depth": 1, "img_size": [16, 16]})
    data = {"data": "synthetic", "seed": 0}
    ckpt = {"spec": to_json(spec), "data_args": data, "precision": "bf16"}
    with pytest.raises(CheckpointError, match=r"\(this run != the checkpoint\): --precision fp32 != bf16; resume with "
                                              r"the checkpoint's spec, data and precision flags"):
        checkpoints.check_resume(ckpt, tmp_path / "last.pt", spec, data, "fp32")
    for precision in ("auto", "bf16"):
        checkpoints.check_resume(ckpt, tmp_path / "last.pt", spec, data, precision)
    checkpoints.check_resume({k: v for k, v in ckpt.items() if k != "precision"}, tmp_path / "last.pt", spec, data,
                             "fp32")


@pytest.mark.parametrize("value,says", [("fp64", "'fp64'"), ("b" * 50, "'" + "b" * 36 + r"\.\.\.")])
def test_a_precision_that_is_none_of_the_runs_is_refused(tmp_path, value, says):
    with pytest.raises(CheckpointError, match=f"the checkpoint's 'precision' is {says}, not one of fp32, bf16, fp16"):
        checkpoints.load(_edited(tmp_path, precision=value), task_type)
    assert checkpoints.load(_edited(tmp_path, precision="bf16"), task_type)["precision"] == "bf16"
