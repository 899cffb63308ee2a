"""vspec/train/setup.py: a run's setup as functions that return what they make; the spec settled once (the recipe
applied, num_classes the data set's, the checkpoint's on --resume) before the task is made, which holds that spec.
`Training`'s public steps (setup, batches, train_step, train), the only ones the benchmarks call."""

import re
from pathlib import Path

import torch

from vspec import Model
from vspec.spec import MHSA, MLP, Block, PatchEmbed
from vspec.train import RunConfig, TrainConfig, resolve
from vspec.train.engine import Training


def _tiny(**changes) -> Model:
    """8 x 8 grey digits, patch 4, one block of width 16."""
    fields = dict(embedder=PatchEmbed(patch_size=4), block=Block(attention=MHSA(heads=2), ffn=MLP(ratio=2.0)),
                  depth=1, dim=16, num_classes=3, img_size=8, in_chans=1)
    return Model(**{**fields, **changes})


def test_the_task_holds_the_final_spec(tmp_path, capsys):
    """digits has 10 classes, the spec asks 3; the recipe sets a drop-path rate: the task is made with the spec the
    model is built from, both settled."""
    t = Training(TrainConfig(_tiny(), resolve("deit"), "digits", RunConfig(out=tmp_path / "run", device="cpu")))
    assert t.setup(model=False)
    assert "digits has 10 classes; setting num_classes = 10" in capsys.readouterr().err
    assert t.spec.num_classes == 10 and t.spec.drop_path == 0.1  # deit's 0.1, the spec's 0.0
    assert t.task.spec is t.spec


PUBLIC = {"setup", "batches", "train_step", "train"}


def test_the_public_steps_drive_a_run(tmp_path):
    """setup, then an epoch's batches and a step on each: the loss of every batch, an optimizer step each."""
    t = Training(TrainConfig(_tiny(), resolve("none", batch_size=32), "digits",
                             RunConfig(out=tmp_path / "run", device="cpu", workers=0)))
    assert t.setup()
    steps = [t.train_step(i, inputs, target) for i, (inputs, target) in zip(range(3), t.batches(0))]
    assert [stepped for _, stepped in steps] == [True] * 3 and t.state.global_step == 3
    assert all(loss.shape == () and torch.isfinite(loss) for loss, _ in steps)


def test_the_benchmarks_call_only_the_public_steps():
    root = Path(__file__).resolve().parents[2] / "benchmarks"
    called = {m for path in root.glob("*.py") if "Training(" in path.read_text()
              for m in re.findall(r"\bt\.(\w+)\(", path.read_text())}
    assert called and called <= PUBLIC, called - PUBLIC
