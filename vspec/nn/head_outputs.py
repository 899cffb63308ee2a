"""The contract between heads and training (DESIGN: heads declare their outputs).

Every head spec declares what it returns in training, `spec.head.outputs()`: one `vspec.spec.Output`
(name, target, weight) per output, readable without building or running the model. `model(x)` returns one logits
tensor in training as in eval (timm's convention: `F.cross_entropy(model(x), y)` works on every model). The declared
outputs come on request: `model.set_training_outputs(True)` (vspec train's loop asks; timm's
`set_distilled_training(True)` is the same idea), and then, in training, a head that declares one sample output of
weight 1 still returns its logits tensor while any other head is called with `outputs=True` and returns a tuple of
`HeadOutput`, one per declared output, in order. The loss of such a forward is the sum of weight x criterion over the
outputs (`head_loss`, also `vspec.head_loss`).

Targets: "sample", logits (B, C) against the sample's label (an image's, a text's); "tokens", logits (B, N, C)
against the sample's label at every token (flattened to (B * N, C), the label repeated N times: hard labels and mixup /
cutmix soft targets alike), or with a token-labelling target (B, C, 2 + N)
(`vspec.train.token_labels.maps.relabel_target`: LV-ViT's token labels, Refiner's released training) against each
token's own label.

What the training forward may add when its outputs are asked for (the spec asks for it): MixToken (`DenseAux.mix_token`)
mixed a box of the token grid between samples; the sample output carries the box (`HeadOutput.box`), so its target is
mixed by the box's share lam = 1 - area / N (`lam t + (1 - lam) t.flip(0)`), the tokens output having been swapped back.
`Model.attention_maps` (Refiner's cos_reg): the first output carries every block's attention maps (`HeadOutput.maps`),
which add the cos_reg term when `head_loss` is given `n_comn`.

Heads that honour a padding mask (True at real tokens) find each sequence's last real token with `last_real`.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import torch

from .. import spec as specs
from .token_losses import cos_reg_term, relabel_cross_entropy, relabel_pooled_cross_entropy, soft_cross_entropy

if TYPE_CHECKING:
    from .mix_token import TokenBox

__all__ = ["HeadOutput", "as_outputs", "head_loss", "last_real", "last_real_token"]


class HeadOutput(NamedTuple):
    """One training output of a head: its logits and its declaration (`vspec.spec.Output`'s fields); `box`, on a
    sample output, the MixToken box its input was mixed by (None: unmixed); `maps`, on the first output, every
    block's attention maps (`Model.attention_maps`; None: not asked for)."""

    logits: torch.Tensor
    name: str = "logits"
    target: str = "sample"
    weight: float = 1.0
    box: "TokenBox | None" = None
    maps: tuple[torch.Tensor, ...] | None = None

    @classmethod
    def of(cls, logits: torch.Tensor, output: specs.Output) -> "HeadOutput":
        """The output of `logits` declared by a head's `Output`."""
        return cls(logits, *output)


def as_outputs(out: torch.Tensor | tuple[HeadOutput, ...]) -> tuple[HeadOutput, ...]:
    """A training forward's result as HeadOutputs: a tensor is the one sample output of weight 1.

    Args:
        out: a training forward's result: a logits tensor, or the head's HeadOutputs.
    """
    if isinstance(out, torch.Tensor):
        return (HeadOutput(out),)
    if not out or not all(isinstance(o, HeadOutput) for o in out):
        raise TypeError("a head returns a logits tensor or a tuple of HeadOutput in training "
                        f"(vspec/nn/head_outputs.py), got {type(out).__name__}")
    return tuple(out)


def _output_loss(criterion: Callable, output: HeadOutput, target: torch.Tensor) -> torch.Tensor:
    """criterion(logits, target) for a sample output; for a tokens output (B, N, C), over every token
    with the sample's target (B,) or soft target (B, C) repeated N times. A sample output with a MixToken box
    takes its target mixed by the box's lam: a soft target (B, C) through `criterion`, hard labels (B,) as one-hot
    rows with the criterion's label smoothing through the soft cross-entropy.

    Args:
        criterion: the loss of logits against targets (e.g. a CrossEntropyLoss).
        output: one output of the head.
        target: the batch's targets: labels (B,), or soft targets (B, C).
    """
    if output.target == "sample":
        if output.box is None:
            return criterion(output.logits, target)
        return _box_mixed_loss(criterion, output.logits, target, output.box.lam)
    if output.target != "tokens":
        raise ValueError(f"head output {output.name!r}: unknown target {output.target!r} (sample | tokens)")
    b, n, c = output.logits.shape
    return criterion(output.logits.reshape(b * n, c), target.repeat_interleave(n, dim=0))


def head_loss(criterion: Callable, out: torch.Tensor | tuple[HeadOutput, ...], target: torch.Tensor, *,
              n_comn: int | None = None, pooled: bool = False, dense_scale: float = 1.0) -> torch.Tensor:
    """The loss of a training forward: the sum of weight x criterion over the head's outputs.

    A token-labelling target (B, C, 2 + N) (relabel_target) takes the released RelabelCrossEntropy
    (`vspec.nn.token_losses.relabel_cross_entropy`, whatever `criterion`: the smoothing is in the target): the sample
    output against column 1 (mixed by its MixToken box), the tokens output against columns 2..; the weights are the
    outputs' declared ones. `pooled`: the released RelabelPooledCrossEntropy instead (label_size 1,
    --dense-avg-pool; the mean of the token logits against the sample's target (B, C), hard labels as smoothed
    one-hot rows). `dense_scale` multiplies the tokens output's weight (the released --annealing-weight: current
    lr / base lr). `n_comn`: add Refiner's cos_reg term over the attention maps the outputs carry
    (`vspec.nn.token_losses.cos_reg_term`; the released cos_reg_component); the maps are not used without it.

    Args:
        criterion: the loss of logits against targets (e.g. a CrossEntropyLoss).
        out: the training forward's result: a logits tensor, or the head's HeadOutputs.
        target: the batch's targets: labels (B,), soft targets (B, C), or token labels (B, C, 2 + N).
        n_comn: the cos_reg term's number of map pairs (None: no term).
        pooled: the pooled relabel loss (label_size 1) instead of the token one.
        dense_scale: the factor on the tokens output's weight.
    """
    outs = tuple(o._replace(weight=o.weight * dense_scale) if o.target == "tokens" and dense_scale != 1.0 else o
                 for o in as_outputs(out))
    maps = next((o.maps for o in outs if o.maps is not None), None)
    if n_comn is not None and maps is None:
        raise ValueError(f"n_comn={n_comn}: the cos_reg term needs the attention maps, which this model's training "
                         "forward does not return (set Model.attention_maps)")
    if target.dim() == 3 or pooled:
        return _relabel_loss(criterion, outs, target, pooled, maps if n_comn is not None else None, n_comn)
    loss = sum(o.weight * _output_loss(criterion, o, target) for o in outs)
    if n_comn is None:
        return loss
    return loss + cos_reg_term(maps, n_comn)


def _relabel_loss(criterion: Callable, outs: tuple[HeadOutput, ...], target: torch.Tensor, pooled: bool, maps,
                  n_comn: int | None) -> torch.Tensor:
    kinds = [o.target for o in outs]
    if sorted(kinds) != ["sample", "tokens"]:
        what = "pooled relabel loss" if pooled else f"token-labelling target {tuple(target.shape)}"
        raise ValueError(f"the {what} needs a head with one sample and one tokens output (a class-token head "
                         f"with the dense head), got {', '.join(f'{o.name} ({o.target})' for o in outs)}")
    cls, aux = sorted(outs, key=lambda o: o.target != "sample")
    box = None if cls.box is None else cls.box.corners
    weights = dict(dense_weight=aux.weight, cls_weight=cls.weight)
    if not pooled:
        cos = {} if maps is None else {"atten": maps, "n_comn": n_comn}
        return relabel_cross_entropy(cls.logits, aux.logits, box, target, **weights, **cos)
    if target.dim() == 1:
        target = _smoothed_one_hot(target, cls.logits, _smoothing(criterion))
    loss = relabel_pooled_cross_entropy(cls.logits, aux.logits, box, target, **weights)
    return loss if maps is None else loss + cos_reg_term(maps, n_comn)


def _smoothing(criterion: Callable) -> float:
    """The label smoothing a criterion applies to hard labels: timm's LabelSmoothingCrossEntropy `smoothing`,
    torch's CrossEntropyLoss `label_smoothing`, else 0."""
    for name in ("smoothing", "label_smoothing"):
        if isinstance(getattr(criterion, name, None), float):
            return getattr(criterion, name)
    return 0.0


def _smoothed_one_hot(labels: torch.Tensor, like: torch.Tensor, smoothing: float) -> torch.Tensor:
    """(B,) labels -> (B, C) rows of the logits `like` (B, C): 1 - s + s / C at the label, s / C elsewhere (timm's
    smoothed targets). One-hot by a scatter: F.one_hot reads the labels back on the CPU to check them."""
    classes = like.shape[1]
    dtype = torch.promote_types(like.dtype, torch.float32)  # not in half precision under autocast
    one_hot = torch.zeros(len(labels), classes, dtype=dtype, device=labels.device).scatter_(1, labels[:, None], 1.0)
    return one_hot * (1.0 - smoothing) + smoothing / classes


def _box_mixed_loss(criterion: Callable, logits: torch.Tensor, target: torch.Tensor, lam: float) -> torch.Tensor:
    """The loss of class logits whose input MixToken mixed: the target lam t + (1 - lam) t.flip(0) (sample b's
    partner is B - 1 - b, as the box's tokens came from it)."""
    soft = target.is_floating_point()
    t = target if soft else _smoothed_one_hot(target, logits, _smoothing(criterion))
    t = lam * t + (1.0 - lam) * t.flip(0)
    if soft:
        return criterion(logits, t)
    return soft_cross_entropy(logits, t)


def last_real(mask: torch.Tensor | None, length: int, device: torch.device) -> torch.Tensor | int:
    """The position of each sequence's last real token (the rightmost True of `mask`, left or right padding);
    without a mask, the last position.

    Args:
        mask: (B, N), True at real tokens; None for none.
        length: N, the sequence's length.
        device: the device of the result.
    """
    if mask is None:
        return length - 1
    return (torch.arange(length, device=device) * mask).argmax(1)


def last_real_token(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Each sequence's last real token (B, N, C) -> (B, C).

    Args:
        x: the tokens (B, N, C).
        mask: (B, N), True at real tokens; None for none.
    """
    if mask is None:
        return x[:, -1]
    return x[torch.arange(x.shape[0], device=x.device), last_real(mask, x.shape[1], x.device)]
