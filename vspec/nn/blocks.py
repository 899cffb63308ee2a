"""The blocks and the stage: the pre-norm `Block` every block kind subclasses (its contract: `block(x, state, *,
mask, causal) -> Carry(x, state)`), the post-norm block, and `Stage` (entry, then blocks; repeated parts tied)."""

import contextlib
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from functools import partial
from typing import NamedTuple

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .. import spec as specs
from .context import BuildContext
from .layers import DropPath, LayerScale, make_norm, maybe, residual

__all__ = ["Block", "Carry", "NO_STATE", "PostNormBlock", "Stage", "running_statistics_kept"]
NO_STATE: Mapping[str, torch.Tensor] = {}  # never changed: every block builds the state it hands on anew

class Carry(NamedTuple):
    """What every block (and stage) returns: its tokens `x` and the `state` it hands on beside them, tensors by key
    (Refiner's attention maps, Conformer's CNN map, a family's own), which the kinds declare (`reads`, `writes`) and
    `vspec.spec.state_layout` shapes; empty for a body that carries nothing."""

    x: torch.Tensor
    state: Mapping[str, torch.Tensor] = NO_STATE


class Block(nn.Module):
    """The pre-norm block (`vspec.spec.Block`): x + attn(norm1(x)), then x + ffn(norm2(x)), each branch with
    optional layer scale and drop path. The other block kinds subclass it: the post-norm block here, the papers' in
    their own files; a kind changes `forward`, or builds what it puts around the attention
    (`build_around_attention`) and runs the attention through it (`attend`).

    One contract for every block kind: `block(x, state={}, *, mask=None, causal=False) -> Carry(x, state)`. `state`:
    what the block before it handed on; the block reads its kind's `reads` (an attention that reads or writes state
    takes it, returns (output, what it wrote)), hands on what it writes and other keys as they came, and drops a key
    it reads or writes that no later part reads (`hands_on`). `mask` (B, N) bool is True at real tokens, False at
    padding (keys no query may attend; each sample needs one real token); `causal` lets token i attend to tokens
    <= i (with a mask too: the real ones, and itself, so that left padding has a key). An attention kind that does
    not declare `masks` / `causal` (vspec.spec.kinds.AttentionKind) is refused a mask in one line."""

    def __init__(self, spec: specs.Block, ctx: BuildContext):
        super().__init__()
        d = ctx.dim
        self.carries = bool(spec.attention.reads or spec.attention.writes)  # the attention takes and returns state
        self.reads, self.touches, self.hands_on = spec.reads, {*spec.reads, *spec.writes}, ctx.hands_on
        self.refusals = tuple(spec.attention.mask_refusal(*asked) for asked in ((True, False), (False, True)))
        self.norm1 = make_norm(spec.norm, d)
        self.attn = ctx.child(spec.attention, tokens=spec.attended(ctx.tokens))
        self.build_around_attention(spec, ctx)
        self.ls1 = maybe(LayerScale, spec.layer_scale is not None, d, spec.layer_scale)
        self.norm2 = make_norm(spec.norm, d)
        self.ffn = ctx.child(spec.ffn)
        self.ls2 = maybe(LayerScale, spec.layer_scale is not None, d, spec.layer_scale)
        self.drop_path = maybe(DropPath, ctx.drop_path > 0, ctx.drop_path)

    def build_around_attention(self, spec: specs.Block, ctx: BuildContext) -> None:
        """What a kind puts around its attention (built right after it, so that its weights come next)."""

    def attend(self, h: torch.Tensor, state: Mapping, mask: torch.Tensor | None, causal: bool) -> tuple:
        """The attention on `h`: (its output, the state it wrote)."""
        masks = self.masks_for(mask, causal)
        if self.carries:
            return self.attn(h, state, **masks)
        return self.attn(h, **masks), {}

    def carry(self, x: torch.Tensor, state: Mapping, wrote: Mapping) -> Carry:
        """Carry(x, `state` with what the block `wrote`), less the keys it reads or writes that it does not hand on."""
        state = {**state, **wrote}
        return Carry(x, {k: v for k, v in state.items() if k in self.hands_on or k not in self.touches})

    def forward(self, x: torch.Tensor, state: Mapping = NO_STATE, *, mask: torch.Tensor | None = None,
                causal: bool = False) -> Carry:
        """x + attn(norm1(x)), then x + ffn(norm2(x)); the state handed on (`Carry`) with what the attention wrote."""
        h, wrote = self.attend(self.norm1(x), state, mask, causal)
        x = residual(x, self.ls1(h), self.drop_path)
        x = residual(x, self.ls2(self.ffn(self.norm2(x))), self.drop_path)
        return self.carry(x, state, wrote)

    def masks_for(self, mask: torch.Tensor | None, causal: bool) -> dict:
        """The attention's mask keywords (none without masks: kinds that honour none need not take them)."""
        if mask is None and not causal:
            return {}
        for wanted, refusal in zip((mask is not None, causal), self.refusals):  # the spec's refusal, as ValueError
            if wanted and refusal:
                raise ValueError(refusal)
        return {"mask": mask, "causal": causal}


class PostNormBlock(Block):
    """The original transformer's block (`vspec.spec.PostNormBlock`): x = norm1(x + attn(x)), then
    x = norm2(x + ffn(x))."""

    def forward(self, x: torch.Tensor, state: Mapping = NO_STATE, *, mask: torch.Tensor | None = None,
                causal: bool = False) -> Carry:
        """norm1(x + attn(x)), then norm2(x + ffn(x)); the state handed on (`Carry`) as in `Block`."""
        h, wrote = self.attend(x, state, mask, causal)
        x = self.norm1(residual(x, self.ls1(h), self.drop_path))
        x = self.norm2(residual(x, self.ls2(self.ffn(x)), self.drop_path))
        return self.carry(x, state, wrote)


class Stage(nn.Module):
    """entry (optional) -> blocks, as the model's `specs.Assembly` lays them out: the tokens, the state each block
    receives and the keys it hands on. With `built` (the tied model's parts by the assembly's keys, shared by all
    stages), a part whose key is in it is that module again, weights tied; a new one is built and recorded."""

    def __init__(self, spec: specs.Stage, shape: specs.StageLayout, ctx: BuildContext, assembly: specs.Assembly,
                 rates: Sequence[float], built: dict[Hashable, nn.Module] | None = None):
        super().__init__()
        self.entry = None
        if spec.entry is not None:
            self.entry = _tied(built, assembly.entry_keys[shape.index],
                               partial(ctx.child, spec.entry, tokens=shape.entry_in, out_dim=shape.tokens.dim))
        blocks = []
        for j, block in enumerate(spec.blocks):
            i = shape.first + j
            blocks.append(_tied(built, assembly.keys[i],
                                partial(ctx.child, block, tokens=shape.tokens, index_in_stage=j, drop_path=rates[i],
                                        state=assembly.state[i], hands_on=assembly.hands_on[i])))
        self.blocks = nn.ModuleList(blocks)
        self.maps_keys = [block.maps_key for block in spec.blocks]  # where each block hands on its attention maps
        self.grad_checkpointing = False  # Transformer.set_grad_checkpointing

    def forward(self, x: torch.Tensor, state: Mapping = NO_STATE, *, mask: torch.Tensor | None = None,
                causal: bool = False, maps: list | None = None, hidden: list | None = None) -> Carry:
        """The entry, then each block with what the one before it hands on (Block's contract); `maps`, a list: each
        block's handed-on attention maps are appended to it (`Model.attention_maps`); `hidden`, a list: each
        block's output tokens (Hugging Face's `output_hidden_states`)."""
        x = x if self.entry is None else self.entry(x)
        for block, key in zip(self.blocks, self.maps_keys):
            x, state = self.run(block, x, state, mask, causal)
            if maps is not None:
                maps.append(state[key])
            if hidden is not None:
                hidden.append(x)
        return Carry(x, state)

    def run(self, block: nn.Module, x: torch.Tensor, state: Mapping, mask: torch.Tensor | None,
            causal: bool) -> Carry:
        """`block(x, state, mask=mask, causal=causal)`; with `grad_checkpointing` while autograd records, under
        activation checkpointing: only the block's inputs are kept for the backward pass, which runs the block
        again to get the rest: the same random draws (dropout, drop path), and its BatchNorms' running statistics
        updated once, by the forward pass (`running_statistics_kept`; compiled, the recomputation is the
        compiler's, which runs a graph's buffer updates once)."""
        if self.grad_checkpointing and torch.is_grad_enabled():
            if torch.compiler.is_compiling():
                return checkpoint(block, x, state, mask=mask, causal=causal, use_reentrant=False)
            return checkpoint(block, x, state, mask=mask, causal=causal, use_reentrant=False,
                              context_fn=lambda: (contextlib.nullcontext(), running_statistics_kept(block)))
        return block(x, state, mask=mask, causal=causal)


def _tied(built: dict[Hashable, nn.Module] | None, key: Hashable, make: Callable[[], nn.Module]) -> nn.Module:
    """`make()`; with `built`, the part built before under `key`, else `make()` recorded under it."""
    if built is None:
        return make()
    if key not in built:
        built[key] = make()
    return built[key]


_BATCH_STATISTICS = ("running_mean", "running_var", "num_batches_tracked")


@contextlib.contextmanager
def running_statistics_kept(module: nn.Module) -> Iterator[None]:
    """Inside, every BatchNorm of `module` updates copies of its running statistics, dropped on leaving: it
    normalises by the same batch statistics and autograd saves the same tensors as in the forward pass (turning
    `track_running_stats` off would save fewer, which checkpoint refuses), and SoT's `masked_batch_norm`, which
    updates them by hand, is covered too. checkpoint's recomputation context.

    Args:
        module: the module whose BatchNorms' running statistics are kept.
    """
    kept = [(m._buffers, name, m._buffers[name]) for m in module.modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) for name in _BATCH_STATISTICS
            if m._buffers.get(name) is not None]
    for buffers, name, tensor in kept:
        buffers[name] = tensor.clone()
    try:
        yield
    finally:
        for buffers, name, tensor in kept:
            buffers[name] = tensor
