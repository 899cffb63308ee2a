"""A model's call on a loader's batch, the one both the training step (vspec/train/engine.py) and evaluation
(vspec/train/evaluate.py) make: an image batch is a tensor, a text batch a dict of input_ids / attention_mask /
token_type_ids (vspec/train/text/batches.py's `pad_batch`) passed by name."""

from __future__ import annotations

from torch import nn

__all__ = ["forward"]


def forward(model: nn.Module, batch):
    """The model's output on `batch` (on its device): `model(**batch)` for a text batch's dict, else `model(batch)`.

    Args:
        model: the model.
        batch: a dict of tensors (a text batch) or the images."""
    return model(**batch) if isinstance(batch, dict) else model(batch)
