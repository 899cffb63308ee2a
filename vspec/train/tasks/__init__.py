"""What a task decides for the training loop (vspec/train/engine.py): its data, its loss, its metrics on the
validation split, the score the best checkpoint is kept by, and how an epoch's record and line read. An image
task (`ImageTask`, tasks/image.py: top-1 / top-5, mixup and cutmix, an EMA's top-1) or a text task (`TextTask`,
tasks/text.py: a GLUE task's or rt-polarity's metrics, the tokenizer a run must keep); `make_task` picks by the
spec's embedder; `Task` says what every task offers. The losses are in vspec/train/losses.py, the evaluation in
vspec/train/evaluate.py."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from ..._moved import moved
from ..data.splits import Splits
from .image import ImageTask
from .text import TextTask, text_score_key

__all__ = ["ImageTask", "Task", "TextTask", "make_task", "score_key", "task_type"]


@runtime_checkable
class Task(Protocol):
    """What a task is to the training loop (torchtune's `Protocol` interfaces). Made as `Task(cfg, spec, splits,
    dist, device, ckpt=None)`: the run's TrainConfig, its final spec, the `Splits` that `read` returned, the
    processes (`Dist`), the device and the checkpoint of a --resume."""

    unit: str  # what the progress line counts: "img", "samples"
    score_key: str  # the record's entry the best checkpoint is kept by
    record_keys: tuple[str, ...]  # what each of its records holds (checked as a checkpoint is read)

    @classmethod
    def read(cls, cfg, spec, dist, device: torch.device, ckpt=None) -> Splits:
        """The run's training and validation splits, class count and what the task keeps of the reading."""

    def init_model(self, model: torch.nn.Module) -> None:
        """A fresh run's starting weights beyond the spec's initialisation."""

    def loss(self, num_classes: int) -> tuple[Any, Any]:
        """(the batch's mixing or None, the criterion)."""

    def prepare(self, batch, train: bool) -> Any:
        """A batch of the loader on the device, ready for the model."""

    def transfer(self, batch) -> Any:
        """A training batch of the loader moved to the device ahead of `batches` (the prefetcher, on CUDA)."""

    def batches(self, loader, train: bool, epoch: int = 0, start: int = 0):
        """The loader's batches (from batch `start` of `epoch`) ready on the device: (inputs, target)."""

    def evaluate(self, model, ema, loader, device: torch.device, amp_ctx) -> dict[str, float]:
        """The validation metrics, each `val_`-prefixed."""

    def record(self, epoch: int, train_loss: float, val: dict[str, float], lr: float, speed: float,
               elapsed: float, step: int) -> dict[str, Any]:
        """An epoch's record (a row of metrics.jsonl and of the checkpoint's "metrics")."""

    def line(self, record: dict[str, Any]) -> str:
        """An epoch's line on stderr."""

    def result(self, score: float, best: float) -> str:
        """The closing line's result."""

    def state(self) -> dict[str, Any]:
        """What the task adds to every checkpoint."""


def task_type(spec) -> type[ImageTask | TextTask]:
    """The task a spec trains: a text body's (its embedder reads token ids) or an image model's.

    Args:
        spec: the model's spec."""
    return TextTask if spec.embedder.text else ImageTask


def make_task(cfg, spec, splits, dist, device: torch.device, ckpt=None) -> ImageTask | TextTask:
    """The task of a run with its final spec (vspec/train/setup.py's `spec_and_data`) and the splits its type read.

    Args:
        cfg: the run's TrainConfig.
        spec: the run's final spec.
        splits: what the task type's `read` returned.
        dist: the run's processes (`Dist`).
        device: this process's device.
        ckpt: the checkpoint of a --resume, or None."""
    return task_type(spec)(cfg, spec, splits, dist, device, ckpt)


def score_key(spec, task: str, ckpt) -> str:
    """The record's entry a finished run's best checkpoint was kept by, its data not read again: that of the task
    `spec` trains (`task`: a text run's --task, or its --data).

    Args:
        spec: the run's spec.
        task: a text run's --task, or its --data.
        ckpt: the run's last.pt contents."""
    return text_score_key(task, ckpt) if spec.embedder.text else ImageTask.score_key


def __getattr__(name: str):
    return moved(__name__, name)
