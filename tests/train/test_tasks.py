"""vspec/train/tasks/: the `Task` protocol, which the image task and the text task both satisfy, made alike."""

import inspect

import pytest
import torch

from vspec import Model, load_spec
from vspec.spec import MHSA, MLP, Block, PatchEmbed
from vspec.train import RunConfig, TrainConfig, resolve
from vspec.train.data.pipelines import HostPath
from vspec.train.data.splits import Splits
from vspec.train.distributed import Dist
from vspec.train.tasks import ImageTask, Task, TextTask, make_task, task_type

CPU = torch.device("cpu")
IMAGE = Model(embedder=PatchEmbed(patch_size=4), block=Block(attention=MHSA(heads=2), ffn=MLP(ratio=2.0)), depth=1,
              dim=16, num_classes=3, img_size=8, in_chans=1)


@pytest.fixture
def made(tmp_path):
    """An image task and a text task, each made by make_task from its splits."""
    text = load_spec("bert_base")  # a text body (never built here)
    image_cfg = TrainConfig(IMAGE, resolve("none"), "digits", RunConfig(out=tmp_path / "i", device="cpu"))
    text_cfg = TrainConfig(text, resolve("none"), "rt-polarity", RunConfig(out=tmp_path / "t", device="cpu"))
    return (make_task(image_cfg, IMAGE, Splits([], [], 3, input_path=HostPath(CPU)), Dist(), CPU),
            make_task(text_cfg, text, Splits([], [], 2, task="rt-polarity", tokenizer={}), Dist(), CPU))


def test_both_tasks_satisfy_the_protocol(made):
    image, text = made
    assert type(image) is ImageTask and type(text) is TextTask
    assert isinstance(image, Task) and isinstance(text, Task)
    assert (image.score_key, text.score_key) == ("val_top1", "val_accuracy")
    assert task_type(IMAGE) is ImageTask and not isinstance(object(), Task)


@pytest.mark.parametrize("name", ["__init__", "read", *sorted(
    n for n, v in vars(Task).items() if inspect.isfunction(v) and not n.startswith("_"))])
def test_both_tasks_are_made_and_called_alike(name):
    """One constructor shape and each of the protocol's methods with the protocol's parameters."""
    def parameters(owner):
        return list(inspect.signature(getattr(owner, name)).parameters)

    assert parameters(ImageTask) == parameters(TextTask)
    if name != "__init__":
        assert parameters(ImageTask) == parameters(Task)


def test_both_tasks_yield_the_loaders_batches_in_order_ready_on_the_device(made):
    """Each batch as the loader gave it, in order: the inputs through the task's `prepare`, the target moved."""
    image, text = made
    images = [(torch.rand(2, 1, 8, 8), torch.tensor([i, 0])) for i in range(3)]
    tokens = [({"input_ids": torch.tensor([[i, 1]]), "attention_mask": torch.ones(1, 2)}, torch.tensor([i]))
              for i in range(3)]
    for task, loader in ((image, images), (text, tokens)):
        got = list(task.batches(loader, True))
        assert [int(t[0]) for _, t in got] == [0, 1, 2]
        for (x, t), (want_x, want_t) in zip(got, loader):
            same = [torch.equal(x[k], want_x[k]) for k in want_x] if isinstance(x, dict) else [torch.equal(x, want_x)]
            assert all(same) and torch.equal(t, want_t) and t.device == CPU
