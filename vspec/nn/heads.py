"""The contract between heads and training (DESIGN: heads declare their outputs).

Every head spec declares what it returns in training, `spec.head.outputs()`: one `vspec.spec.Output`
(name, target, weight) per output, readable without building or running the model. In eval mode every
head returns one logits tensor. In training mode a head that declares one sample output of weight 1
returns its logits tensor; any other head returns a tuple of `HeadOutput`, one per declared output, in
order. The loss of a training forward is the sum of weight x criterion over the outputs (`head_loss`).

Targets: "sample", logits (B, C) against the sample's label (an image's, a text's); "tokens", logits (B, N, C)
against the sample's label at every token (flattened to (B * N, C), the label repeated N times: hard labels and mixup /
cutmix soft targets alike). Without token-level labels this is all the dense auxiliary head learns
from; token labels, MixToken and token relabelling (LV-ViT, Refiner's released training) are not
implemented.

Heads that honour a padding mask (True at real tokens) find each sequence's last real token with `last_real`.
"""

from collections.abc import Callable
from typing import NamedTuple

import torch

from .. import spec as S


class HeadOutput(NamedTuple):
    """One training output of a head: its logits and its declaration (`vspec.spec.Output`'s fields)."""

    logits: torch.Tensor
    name: str = "logits"
    target: str = "sample"
    weight: float = 1.0

    @classmethod
    def of(cls, logits: torch.Tensor, output: S.Output) -> "HeadOutput":
        return cls(logits, *output)


def as_outputs(out: torch.Tensor | tuple[HeadOutput, ...]) -> tuple[HeadOutput, ...]:
    """A training forward's result as HeadOutputs: a tensor is the one sample output of weight 1."""
    if isinstance(out, torch.Tensor):
        return (HeadOutput(out),)
    if not out or not all(isinstance(o, HeadOutput) for o in out):
        raise TypeError("a head returns a logits tensor or a tuple of HeadOutput in training "
                        f"(vspec/nn/heads.py), got {type(out).__name__}")
    return tuple(out)


def output_loss(criterion: Callable, output: HeadOutput, target: torch.Tensor) -> torch.Tensor:
    """criterion(logits, target) for a sample output; for a tokens output (B, N, C), over every token
    with the sample's target (B,) or soft target (B, C) repeated N times."""
    if output.target == "sample":
        return criterion(output.logits, target)
    if output.target != "tokens":
        raise ValueError(f"head output {output.name!r}: unknown target {output.target!r} (sample | tokens)")
    b, n, c = output.logits.shape
    return criterion(output.logits.reshape(b * n, c), target.repeat_interleave(n, dim=0))


def head_loss(criterion: Callable, out: torch.Tensor | tuple[HeadOutput, ...], target: torch.Tensor) -> torch.Tensor:
    """The loss of a training forward: the sum of weight x criterion over the head's outputs."""
    return sum(o.weight * output_loss(criterion, o, target) for o in as_outputs(out))


def last_real(mask: torch.Tensor | None, length: int, device: torch.device) -> torch.Tensor | int:
    """The position of each sequence's last real token (the rightmost True of `mask`, left or right padding);
    without a mask, the last position."""
    if mask is None:
        return length - 1
    return (torch.arange(length, device=device) * mask).argmax(1)


def last_real_token(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Each sequence's last real token (B, N, C) -> (B, C)."""
    if mask is None:
        return x[:, -1]
    return x[torch.arange(x.shape[0], device=x.device), last_real(mask, x.shape[1], x.device)]
