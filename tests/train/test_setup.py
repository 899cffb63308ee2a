"""vspec/train/setup.py: a run's setup as functions that return what they make; the spec settled once (the recipe
applied, num_classes the data set's, the checkpoint's on --resume) before the task is made, which holds that spec."""

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
    t.resolve_resume()
    t.make_data()
    assert "digits has 10 classes; setting num_classes = 10" in capsys.readouterr().err
    assert t.spec.num_classes == 10 and t.spec.drop_path == 0.1  # deit's 0.1, the spec's 0.0
    assert t.task.spec is t.spec
