"""The contracts of the modules a model is assembled from, whatever their kind (torchtune's and torchtitan's
`Protocol` interfaces): what the stage, the model, the profiler and the figures rely on of a block, an attention and
a head module. A kind's module satisfies them by its `forward`'s parameters, what it returns and the attributes
named here; it need not subclass anything (vspec/nn/blocks.py's `Block` satisfies the block's, and its subclasses
with it). An `isinstance` check sees the names alone; `tests/helpers/contracts.py` checks every registered kind's
module against the whole contract: forward's signature, what it returns, the attributes.

The training side's contracts: `vspec.train.tasks.Task`, `vspec.train.data.pipelines.InputPath`."""

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from .blocks import NO_STATE, Carry

__all__ = ["AttentionModule", "BlockModule", "HeadModule"]


@runtime_checkable
class BlockModule(Protocol):
    """A block (`Stage.run`): `block(x, state, mask=mask, causal=causal) -> Carry(x, state)`, x (B, N, dim) in and
    out. `state`: what the block before it handed on (tensors by key), left out where its kind `reads` none (the
    profiler calls such a part with its tokens alone); the Carry's state: what it writes, every other key as it
    came, less a key it reads or writes that no later part reads (`BuildContext.hands_on`); where its kind has a
    `maps_key` and a later part reads it, its attention maps (B, H, N, N) under that key (the stage hands them to
    `Model.attention_maps`' training output). `mask` (B, N) bool: True at real tokens; `causal`: token i attends to
    tokens <= i; both keywords, always passed by the stage (None / False where the body has none), refused in one
    line (ValueError) where its attention does not declare them."""

    def forward(self, x: torch.Tensor, state: Mapping[str, torch.Tensor] = NO_STATE, *,
                mask: torch.Tensor | None = None, causal: bool = False) -> Carry:
        """The block's tokens and the state it hands on.

        Args:
            x: the tokens (B, N, dim).
            state: what the block before it handed on, by key.
            mask: (B, N) bool, True at real tokens; None: no padding.
            causal: whether token i attends to tokens <= i only."""


@runtime_checkable
class AttentionModule(Protocol):
    """A block's attention (`Block.attend`): `attn(x) -> out`, out (B, N, dim) as x. Its kind's declarations
    decide the rest of the call: `reads` / `writes` state: `attn(x, state) -> (out, {key: tensor it wrote})`;
    `masks` or `causal`: the keywords `mask=` ((B, N) bool, True at real tokens, or None) and `causal=`, passed
    together where the body has a padding mask or is causal (a kind that declares neither is never passed them).
    `heads`: its number of heads (the figures read it). Its token mixing runs in an `AttentionCoreBase` submodule
    (vspec/nn/layers.py): where the profiler counts the attention's MACs and `vspec analyze` reads its maps."""

    heads: int

    def forward(self, x: torch.Tensor, *args: Any, **masks: Any) -> torch.Tensor | tuple[torch.Tensor, dict]:
        """The attention's output; with state, (the output, what it wrote).

        Args:
            x: the normalised tokens (B, N, dim).
            *args: `state`, for a kind that reads or writes state.
            **masks: `mask` and `causal`, for a kind that declares them."""


@runtime_checkable
class HeadModule(Protocol):
    """The model's head (`Transformer.forward` / `forward_head`): `head(x, pre_logits=False) -> logits` (B,
    classes) from the last tokens x (B, N, dim); with `pre_logits=True` the features its classifier reads. Keywords
    by its kind's declarations: `mask=` (B, N) bool of a text body's real tokens (`masks`), `state=` the keys it
    `reads`, `outputs=True` in a training forward whose outputs the loop asked for (a kind whose `outputs()` are
    not LOGITS: then a tuple of `vspec.nn.head_outputs.HeadOutput`, one per declared output, in order), `box=`
    MixToken's box (`mixes_tokens`). `reset(num_classes)`: a new classifier, the new modules returned (timm's
    `reset_classifier`); `classifier()`: the module that maps the pre-logits to the logits (`get_classifier`)."""

    def forward(self, x: torch.Tensor, pre_logits: bool = False, **keywords: Any) -> Any:
        """The logits, the features (`pre_logits`) or the declared outputs (`outputs=True`).

        Args:
            x: the last tokens (B, N, dim), after the final norm.
            pre_logits: return the features the classifier reads instead of the logits.
            **keywords: `mask`, `state`, `outputs`, `box`, as its kind declares them."""

    def reset(self, num_classes: int) -> list[nn.Module]:
        """A new classifier for `num_classes`; returns its new modules.

        Args:
            num_classes: the new classifier's classes; 0: none (the head returns its features)."""

    def classifier(self) -> nn.Module:
        """The module that maps `forward(x, pre_logits=True)` to the logits."""
