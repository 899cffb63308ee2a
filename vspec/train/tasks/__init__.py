"""What a task decides for the training loop (vspec/train/engine.py): its data, its loss, its metrics on the
validation split, the score the best checkpoint is kept by, and how an epoch's record and line read. An image
task (`ImageTask`, tasks/image.py: top-1 / top-5, mixup and cutmix, an EMA's top-1) or a text task (`TextTask`,
tasks/text.py: a GLUE task's or rt-polarity's metrics, the tokenizer a run must keep); `make_task` picks by the
spec's embedder. The losses are in vspec/train/losses.py, the evaluation in vspec/train/evaluate.py."""

from __future__ import annotations

import torch

from ..._moved import moved
from .image import ImageTask
from .text import TextTask, text_score_key

__all__ = ["ImageTask", "TextTask", "make_task", "score_key", "task_type"]


def task_type(spec) -> type[ImageTask | TextTask]:
    """The task a spec trains: a text body's (its embedder reads token ids) or an image model's."""
    return TextTask if spec.embedder.text else ImageTask


def make_task(cfg, spec, splits, dist, device: torch.device, ckpt=None) -> ImageTask | TextTask:
    """The task of a run with its final spec (vspec/train/setup.py's `spec_and_data`) and the splits its type read."""
    return task_type(spec)(cfg, spec, splits, dist, device, ckpt)


def score_key(cfg, ckpt) -> str:
    """The record's entry a finished run's best checkpoint was kept by, its data not read again."""
    return text_score_key(cfg.data.task or cfg.data.name, ckpt) if cfg.spec.embedder.text else ImageTask.score_key


def __getattr__(name: str):
    return moved(__name__, name)
