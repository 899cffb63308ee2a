"""vspec/train/checkpoints.py, last.pt's one owner: its reader checks each record for the keys of the task the
checkpoint's spec trains (asked of the task, not guessed from the data set's name); a previous release's checkpoint
still loads."""

from pathlib import Path

import pytest
import torch

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
