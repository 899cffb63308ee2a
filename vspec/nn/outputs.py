"""What a model returns when it is called as a Hugging Face model (`labels=`, `return_dict=`,
`output_hidden_states=`): `ModelOutput` (loss, logits, hidden_states), and the loss of the head by Hugging Face's
`problem_type` rule (`sequence_loss`). The plain call stays one logits tensor (timm's convention); nothing here
imports transformers."""

from collections import OrderedDict
from collections.abc import Mapping

import torch
import torch.nn.functional as F

__all__ = ["ModelOutput", "hf_output", "sequence_loss"]
_FIELDS = ("loss", "logits", "hidden_states")


class ModelOutput(OrderedDict):
    """transformers' `ModelOutput` as its `Trainer` and pipelines read it: a dict of the fields that are not None,
    in the order loss, logits, hidden_states; `out.loss` / `out["loss"]` by name (an absent field's attribute is
    None), `out[0]` / `out[1:]` over the present values in order, `to_tuple()` all of them. Built from a dict or
    (key, value) pairs alone too, as accelerate and torch rebuild a Mapping (`type(out)({...})`)."""

    def __init__(self, loss: torch.Tensor | None = None, logits: torch.Tensor | None = None,
                 hidden_states: tuple[torch.Tensor, ...] | None = None):
        super().__init__()
        items = zip(_FIELDS, (loss, logits, hidden_states))
        if logits is None and hidden_states is None and loss is not None and not isinstance(loss, torch.Tensor):
            items = loss.items() if isinstance(loss, Mapping) else loss
        for key, value in items:
            if key not in _FIELDS:
                raise KeyError(f"{type(self).__name__}: fields are {', '.join(_FIELDS)}, not {key!r}")
            self[key] = value

    def __getattr__(self, name: str):
        if name in _FIELDS:
            return self.get(name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __setattr__(self, name: str, value) -> None:
        if name not in _FIELDS:
            raise AttributeError(f"{type(self).__name__}: fields are {', '.join(_FIELDS)}, not {name!r}")
        self[name] = value

    def __setitem__(self, key, value) -> None:
        if value is None:
            self.pop(key, None)  # absent, as a None field is
        else:
            super().__setitem__(key, value)

    def __getitem__(self, key):
        if isinstance(key, str):
            return super().__getitem__(key)
        return self.to_tuple()[key]

    def to_tuple(self) -> tuple:
        """The present values, in order."""
        return tuple(self.values())


def sequence_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss of sample logits (B, C) against `labels`, by Hugging Face's `problem_type` rule for
    `...ForSequenceClassification`: one output (C == 1) is a regression, mean squared error of the squeezed logits
    against the labels as floats (STS-B); integer labels (B,) are classes, cross-entropy (label -100 ignored, as
    HF's); float labels of the logits' shape are multi-label targets, BCE with logits.

    Args:
        logits: the sample logits (B, C).
        labels: classes (B,), regression targets, or multi-label targets (B, C).
    """
    if labels.dtype == torch.bool or labels.is_complex():
        raise ValueError(f"labels of dtype {labels.dtype}: give integer classes, or float targets")
    if logits.ndim != 2:
        raise ValueError(f"labels: the loss is computed on sample logits (B, C), these are {tuple(logits.shape)}")
    if logits.shape[1] == 1:
        return F.mse_loss(logits.squeeze(), labels.squeeze().to(logits.dtype))
    if not labels.is_floating_point():
        return F.cross_entropy(logits, labels.reshape(-1).long())
    if labels.shape != logits.shape:
        raise ValueError(f"float labels of shape {tuple(labels.shape)}: multi-label targets take the logits' shape "
                         f"{tuple(logits.shape)} (integer labels are classes)")
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


def hf_output(logits: torch.Tensor, labels: torch.Tensor | None, hidden_states: list | None,
              return_dict: bool | None, num_classes: int) -> ModelOutput | tuple:
    """A Hugging Face model's return: `ModelOutput`, or with `return_dict=False` the tuple of its present values.

    Args:
        logits: the model's logits.
        labels: the targets (None: no loss).
        hidden_states: each block's output (None: not asked for).
        return_dict: False returns the tuple (None or True: the ModelOutput).
        num_classes: the classifier's classes (0: none).
    """
    if labels is not None and not num_classes:
        raise ValueError("labels: this model has no classifier (num_classes 0) to compute a loss on")
    loss = None if labels is None else sequence_loss(logits, labels)
    out = ModelOutput(loss, logits, None if hidden_states is None else tuple(hidden_states))
    return out.to_tuple() if return_dict is False else out
