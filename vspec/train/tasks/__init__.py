"""What a task decides for the training loop (vspec/train/engine.py): its data, its loss, its metrics on the
validation split, the score the best checkpoint is kept by, and how an epoch's record and line read. An image
task (`ImageTask`, tasks/image.py: top-1 / top-5, mixup and cutmix, an EMA's top-1) or a text task (`TextTask`,
tasks/text.py: a GLUE task's or rt-polarity's metrics, the tokenizer a run must keep); `make_task` picks by the
spec's embedder. The losses are in vspec/train/losses.py, the evaluation in vspec/train/evaluate.py."""

from __future__ import annotations

import torch

from ..._moved import moved
from .image import ImageTask
from .text import TextTask

__all__ = ["ImageTask", "TextTask", "make_task"]


def make_task(cfg, spec, recipe, dist, out, ckpt, device: torch.device) -> ImageTask | TextTask:
    """The task of a run: a text body's (its embedder reads token ids) or an image model's."""
    if spec.embedder.text:
        return TextTask(cfg, spec, recipe, dist, out, ckpt, device)
    return ImageTask(cfg, spec, recipe, dist, device)


def __getattr__(name: str):
    return moved(__name__, name)
