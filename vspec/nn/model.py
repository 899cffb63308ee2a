"""The model assembled from a Model spec: blocks, stages and the transformer (images or text), with timm's model
API (including its feature API) and the layout that the profiler and the CLI read."""

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import attrs
import torch
from einops import rearrange
from torch import nn
from torch.utils.checkpoint import checkpoint

from .. import spec as S
from ..ops import sincos_1d, sincos_2d
from ..ops.resample import resample_pos_embed
from ..spec.kinds import LOGITS
from ..spec.layout import MAPS
from ..spec.weights import inputs_cfg
from .context import BuildContext
from .heads import as_outputs
from .inputs import TokenInputs, inputs_of
from .layers import Component, DropPath, LayerScale, make_norm, maybe
from .mix_token import BoxDraw, TokenBox, draw_box, swap_box

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

    def __init__(self, spec: S.Block, ctx: BuildContext):
        super().__init__()
        d = ctx.dim
        self.carries = bool(spec.attention.reads or spec.attention.writes)  # the attention takes and returns state
        self.reads, self.touches, self.hands_on = spec.reads, {*spec.reads, *spec.writes}, ctx.hands_on
        self.kind, self.masks, self.causal = spec.attention.kind, spec.attention.masks, spec.attention.causal
        self.norm1 = make_norm(spec.norm, d)
        self.attn = ctx.child(spec.attention, tokens=spec.attended(ctx.tokens))
        self.build_around_attention(spec, ctx)
        self.ls1 = maybe(LayerScale, spec.layer_scale is not None, d, spec.layer_scale)
        self.norm2 = make_norm(spec.norm, d)
        self.ffn = ctx.child(spec.ffn)
        self.ls2 = maybe(LayerScale, spec.layer_scale is not None, d, spec.layer_scale)
        self.drop_path = maybe(DropPath, ctx.drop_path > 0, ctx.drop_path)

    def build_around_attention(self, spec: S.Block, ctx: BuildContext) -> None:
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
        h, wrote = self.attend(self.norm1(x), state, mask, causal)
        x = x + self.drop_path(self.ls1(h))
        x = x + self.drop_path(self.ls2(self.ffn(self.norm2(x))))
        return self.carry(x, state, wrote)

    def masks_for(self, mask: torch.Tensor | None, causal: bool) -> dict:
        """The attention's mask keywords (none without masks: kinds that honour none need not take them)."""
        if mask is None and not causal:
            return {}
        for wanted, able, what in ((mask is not None, self.masks, "a key-padding mask"),
                                   (causal, self.causal, "a causal mask")):
            if wanted and not able:
                raise ValueError(f"{self.kind} attention cannot honour {what}")
        return {"mask": mask, "causal": causal}


class PostNormBlock(Block):
    """The original transformer's block (`vspec.spec.PostNormBlock`): x = norm1(x + attn(x)), then
    x = norm2(x + ffn(x))."""

    def forward(self, x: torch.Tensor, state: Mapping = NO_STATE, *, mask: torch.Tensor | None = None,
                causal: bool = False) -> Carry:
        h, wrote = self.attend(x, state, mask, causal)
        x = self.norm1(x + self.drop_path(self.ls1(h)))
        x = self.norm2(x + self.drop_path(self.ls2(self.ffn(x))))
        return self.carry(x, state, wrote)


class Stage(nn.Module):
    """entry (optional) -> blocks. `keys[j]` says which blocks compute the same thing: equal keys for
    blocks of one spec on the same tokens with one variant (a window shift's parity), the same state read and
    handed on, repeated or listed, in this stage or another; `entry_key` does the same for the entry.

    With `ctx.tie_repeats`, a part whose key is in `built` (shared by all stages of the model) is that
    module again, weights tied; a new one is built and recorded."""

    def __init__(self, spec: S.Stage, shape: S.StageLayout, ctx: BuildContext, rates: Sequence[float],
                 built: dict[Hashable, nn.Module], states: Sequence[Mapping]):
        """`states`: the state shapes each block receives, then the next part (a slice of `S.state_layout`)."""
        super().__init__()
        self.entry = self.entry_key = None
        if spec.entry is not None:
            self.entry_key = ("entry", spec.entry, shape.entry_in, shape.tokens.dim)
            if not (ctx.tie_repeats and self.entry_key in built):
                built[self.entry_key] = ctx.child(spec.entry, tokens=shape.entry_in, out_dim=shape.tokens.dim)
            self.entry = built[self.entry_key]
        self.keys: list[Hashable] = []
        blocks = []
        for j, block in enumerate(spec.blocks):
            i = shape.first + j
            state, after = states[j], states[j + 1]
            hands_on = frozenset(k for k in after if k in block.reads or k in block.writes)
            key = ("block", shape.tokens, block, block.variant(shape.tokens, j), hands_on,
                   tuple((k, state[k]) for k in block.reads))
            if not (ctx.tie_repeats and key in built):
                built[key] = ctx.child(block, tokens=shape.tokens, index_in_stage=j, drop_path=rates[i], state=state,
                                       hands_on=hands_on)
            self.keys.append(key)
            blocks.append(built[key])
        self.blocks = nn.ModuleList(blocks)
        self.grad_checkpointing = False  # Transformer.set_grad_checkpointing

    def forward(self, x: torch.Tensor, state: Mapping = NO_STATE, *, mask: torch.Tensor | None = None,
                causal: bool = False, maps: list | None = None) -> Carry:
        """The entry, then each block with what the one before it hands on (Block's contract); `maps`, a list: each
        block's handed-on attention maps are appended to it (`Model.attention_maps`)."""
        x = x if self.entry is None else self.entry(x)
        for block in self.blocks:
            x, state = self.run(block, x, state, mask, causal)
            if maps is not None:
                maps.append(state[MAPS])
        return Carry(x, state)

    def run(self, block: nn.Module, x: torch.Tensor, state: Mapping, mask: torch.Tensor | None,
            causal: bool) -> Carry:
        """`block(x, state, mask=mask, causal=causal)`; with `grad_checkpointing` while autograd records, under
        activation checkpointing: only the block's inputs are kept for the backward pass, which runs the block
        again (same random draws: dropout, drop path) to get the rest."""
        if self.grad_checkpointing and torch.is_grad_enabled():
            return checkpoint(block, x, state, mask=mask, causal=causal, use_reentrant=False)
        return block(x, state, mask=mask, causal=causal)


@dataclass(frozen=True)
class Part:
    """One step of the forward pass, as the profiler and the CLI read it. `stage` and `index` (the
    block's position in its stage) are None where they do not apply; `in_shape` is the per-sample input
    ((C, H, W) for the embedder, (N, C) tokens for the others); parts with equal `key` compute the same
    thing; `extra` are parameters on the model that belong to the part (the embedder's class token and
    position embedding); `ids_below`: the input is integer ids below it (a text embedder's token ids), None for a
    float input; `state_in`: (key, per-sample shape) of each state key a block or the head reads (`state=`)."""

    name: str
    role: str  # embedder | entry | block | norm | head
    stage: int | None
    index: int | None
    module: nn.Module
    in_shape: tuple[int, ...]
    key: Hashable
    extra: tuple[nn.Parameter, ...] = ()
    ids_below: int | None = None
    state_in: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def example(self, batch: int = 1, device: torch.device | str | None = None) -> torch.Tensor:
        """A random input of the part: N(0, 1), or token ids."""
        if self.ids_below is not None:
            return torch.randint(self.ids_below, (batch, *self.in_shape), device=device)
        return torch.randn(batch, *self.in_shape, device=device)


class Transformer(nn.Module):
    """embedder -> [class token] -> + position embedding -> stages -> final norm -> head, for any spec: what the
    model reads is its `inputs`' business (vspec/nn/inputs.py), what each block does its kind's, and the state beside
    the tokens (`Carry`, keys the kinds name) is threaded from the embedder through the blocks to the head.

    A text body (`spec.embedder.text`) takes `input_ids` (B, L) and, by keyword as Hugging Face models do,
    `attention_mask` (B, L; 1 at real tokens, 0 at padding) and `token_type_ids`; padding is masked in every
    attention and in the head, and `spec.causal` makes every attention causal.

    timm conventions: `forward_features`, `forward_head(x, pre_logits=False)`, `forward_intermediates`,
    `feature_info`, `num_classes`, `num_features`, `reset_classifier`, `get_classifier`,
    `no_weight_decay`; `model(x)` is the logits tensor in both modes, the head's declared training outputs come on
    request (`set_training_outputs`, as timm's `set_distilled_training`). `.spec` is the spec it was built from
    (kept in step by `reset_classifier`), `.layout` its stages' shapes, `.state_layout` its carried state's, `.parts()`
    the steps of its forward pass.
    """

    def __init__(self, spec: S.Model, ctx: BuildContext):
        super().__init__()
        self.spec = spec
        self.layout = S.layout(spec)
        self.num_classes = spec.num_classes
        self.num_features = spec.dim
        self.embed_dim = self.layout[0].tokens.dim
        self.num_prefix_tokens = spec.num_prefix_tokens
        self.inputs, self.causal = inputs_of(spec), spec.causal
        self.state_layout = S.state_layout(spec)  # the state each block receives, then the head's
        self.starts = bool(spec.embedder.writes)
        self.head_state = tuple(k for k in self.state_layout[-1] if k in spec.head.reads)  # keys
        self.mix_token, self.attention_maps = spec.head.mixes_tokens, spec.attention_maps  # training outputs
        self.training_outputs, self.draw_box = False, draw_box  # set_training_outputs: the loop's request
        self.head_outputs = spec.head.outputs() != LOGITS  # the head returns HeadOutputs when they are asked for
        first = ctx.tokens  # what the embedder produces
        d = first.dim
        self.embedder = ctx.child(spec.embedder)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d)) if spec.class_token else None
        if spec.pos_embed == "learned":
            self.pos_embed = nn.Parameter(torch.zeros(1, first.length, d))
        elif spec.pos_embed == "sincos1d":
            self.register_buffer("pos_embed", sincos_1d(first.length, d)[None], persistent=False)
        elif spec.pos_embed == "sincos2d":  # patch tokens only; prefix tokens get zeros
            table = torch.cat((torch.zeros(first.prefix, d), sincos_2d(*first.grid, d)))
            self.register_buffer("pos_embed", table[None], persistent=False)
        else:
            self.pos_embed = None
        depth = spec.depth  # a sum over the stages: once, not per block
        rates = [spec.drop_path * i / max(depth - 1, 1) for i in range(depth)]  # one ramp, all stages
        built: dict[Hashable, nn.Module] = {}  # the tied model's distinct parts, across stages
        self.stages = nn.ModuleList(Stage(s, shape, ctx, rates, built,
                                          self.state_layout[shape.first:shape.first + shape.depth + 1])
                                    for s, shape in zip(spec.stages, self.layout))
        last = self.layout[-1].tokens
        self.norm = make_norm(spec.stages[-1].blocks[-1].norm, last.dim) if spec.final_norm else nn.Identity()
        self.head = ctx.child(spec.head, tokens=last, state=self.state_layout[-1])
        self.feature_info = self._feature_info()
        if spec.init == "timm" and not next(self.parameters()).is_meta:  # meta tensors hold no values to set
            self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """timm's ViT init: Linear weights trunc-normal(0.02) with zero bias, learned position
        embedding trunc-normal(0.02), class token normal(1e-6); other layers keep their own init."""
        if isinstance(self.pos_embed, nn.Parameter):
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)
        for m in self.modules():
            _init_linear(m)

    # ---------------------------------------------------------------- layout
    def parts(self) -> list[Part]:
        """The forward pass step by step: embedder, each stage's entry and blocks, final norm, head."""
        root = tuple(p for p in (self.cls_token, self.pos_embed) if isinstance(p, nn.Parameter))
        shape, ids_below = self.inputs.part()
        out = [Part("embedder", "embedder", None, None, self.embedder, shape, "embedder", root, ids_below=ids_below)]
        for shape, stage, stage_spec in zip(self.layout, self.stages, self.spec.stages):
            i, t = shape.index, shape.tokens
            if stage.entry is not None:
                e = shape.entry_in
                out.append(Part(f"stages.{i}.entry", "entry", i, None, stage.entry, (e.length, e.dim), stage.entry_key))
            out += [Part(f"stages.{i}.blocks.{j}", "block", i, j, block, (t.length, t.dim), key,
                         state_in=_shapes(spec.reads, self.state_layout[shape.first + j]))
                    for j, (block, key, spec) in enumerate(zip(stage.blocks, stage.keys, stage_spec.blocks))]
        last = self.layout[-1].tokens
        if self.spec.final_norm:
            out.append(Part("norm", "norm", None, None, self.norm, (last.length, last.dim), "norm"))
        return out + [Part("head", "head", None, None, self.head, (last.length, last.dim), "head",
                           state_in=_shapes(self.head_state, self.state_layout[-1]))]

    def _feature_info(self) -> list[dict]:
        """timm's feature_info: one entry per block of a one-stage model, per stage otherwise."""
        if len(self.layout) == 1:
            s = self.layout[0]
            return [dict(module=f"stages.0.blocks.{j}", num_chs=s.tokens.dim, reduction=s.reduction, stage=0, index=j)
                    for j in range(s.depth)]
        return [dict(module=f"stages.{s.index}", num_chs=s.tokens.dim, reduction=s.reduction, stage=s.index,
                     index=s.depth - 1) for s in self.layout]

    # ---------------------------------------------------------------- timm's model API
    @property
    def pretrained_cfg(self) -> dict:
        """timm's pretrained_cfg: the inputs of the weights the model holds (published ones, a training run's), set
        where it loads them; else vspec's default, marked (`vspec.spec.weights.inputs_cfg`; `create_model` of a
        preset sets the preprocessing its weights declare). `default_cfg` is the same dict, as in timm."""
        return self.__dict__.get("_pretrained_cfg") or inputs_cfg(self.spec)

    @pretrained_cfg.setter
    def pretrained_cfg(self, cfg: dict) -> None:
        self.__dict__["_pretrained_cfg"] = cfg

    default_cfg = pretrained_cfg

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """timm's: activation checkpointing over the blocks (`Stage.run`), trading a second forward pass of each
        block in the backward pass for the activations it would keep."""
        for stage in self.stages:
            stage.grad_checkpointing = enable

    def group_matcher(self, coarse: bool = False) -> dict:
        """timm's parameter groups, in forward order (layer-wise lr decay: `timm.optim.create_optimizer_v2(model,
        layer_decay=...)`): the stem (embedder, class token, position table), each block (a stage's entry with
        its first block; `coarse`: each stage of a hierarchical model), the final norm; the head, unmatched, last."""
        stem = r"^(?:embedder|cls_token|pos_embed)(?:\.|$)"
        if coarse and len(self.stages) > 1:
            return {"stem": stem, "blocks": r"^stages\.(\d+)\."}
        return {"stem": stem, "blocks": [(r"^stages\.(\d+)\.entry\.", (0,)), (r"^stages\.(\d+)\.blocks\.(\d+)\.", None),
                                         (r"^norm\.", (99999,))]}

    def no_weight_decay(self) -> set[str]:
        names = {name for name in ("pos_embed", "cls_token") if isinstance(getattr(self, name), nn.Parameter)}
        for prefix, m in self.named_modules():
            if isinstance(m, Component):
                names |= {f"{prefix}.{n}" for n in m.no_weight_decay_names}
        return names

    def get_classifier(self) -> nn.Module:
        """The module that maps `forward_head(x, pre_logits=True)` to the logits (the head's `classifier()`: for a
        head with two classifiers, one callable over both; with a dense auxiliary head, the class-token
        classifier: the auxiliary term reads the patch tokens, as in timm's VOLO)."""
        return self.head.classifier()

    def reset_classifier(self, num_classes: int) -> None:
        new = self.head.reset(num_classes)
        self.num_classes = num_classes
        self.spec = attrs.evolve(self.spec, num_classes=num_classes)
        if self.spec.init == "timm":
            for fc in new:
                _init_linear(fc)

    def example_input(self, batch: int = 1, **kwargs) -> torch.Tensor:
        """A random batch the model takes (`example_input(self.spec, batch, ...)`)."""
        return example_input(self.spec, batch, **kwargs)

    @property
    def text(self) -> bool:
        """Whether it reads token ids (a text body) rather than images."""
        return isinstance(self.inputs, TokenInputs)

    def padding(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        """Hugging Face's attention_mask (B, L), 1 / True at real tokens, as the blocks' bool mask (refused by an
        image model)."""
        return self.inputs.padding(x, attention_mask)

    def forward_tokens(self, x: torch.Tensor, token_type_ids: torch.Tensor | None = None, *,
                       box: TokenBox | None = None) -> Carry:
        """Images (or token ids) -> the first stage's input (embedder, class token, position embedding), and the state
        the embedder starts beside the tokens (its kind's `writes`); with a MixToken `box`, the embedder's tokens
        in it swapped with the batch-flipped sample's first (vspec.nn.mix_token)."""
        out, grid = self.inputs.embed(self.embedder, x, token_type_ids)
        x, state = out if self.starts else (out, NO_STATE)  # an embedder that writes state: (tokens, {key: tensor})
        return Carry(self._prepend(x if box is None else swap_box(x, box), grid), state)

    def input_grid(self, x: torch.Tensor) -> tuple[int, int]:
        """The token grid of images `x` (vspec.nn.inputs.ImageInputs.grid)."""
        return self.inputs.grid(x)

    def _prepend(self, x: torch.Tensor, grid: tuple[int, int] | None = None) -> torch.Tensor:
        """The class token, then the position embedding (at `grid`, when it is not the spec's: the learned table
        resampled bicubic as vspec.resample does, a fixed table computed there; None: the spec's)."""
        if self.cls_token is not None:
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        pos, built = self.pos_embed, self.layout[0].tokens
        if pos is None or grid is None or tuple(grid) == built.grid:
            return x if pos is None else x + pos
        if self.spec.pos_embed == "learned":
            pos = resample_pos_embed(pos, built.grid, grid, built.prefix)
        elif self.spec.pos_embed == "sincos1d":
            pos = sincos_1d(built.prefix + grid[0] * grid[1], built.dim)[None].to(x)
        else:  # sincos2d: patch tokens only; prefix tokens get zeros
            pos = torch.cat((x.new_zeros(built.prefix, built.dim), sincos_2d(*grid, built.dim).to(x)))[None]
        return x + pos

    def forward_features(self, x: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                         token_type_ids: torch.Tensor | None = None, *,
                         input_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The last hidden states (B, N, dim), after the final norm; (tokens, *the state the head reads) where it reads
        some (`head_state`'s order; Conformer's: (tokens, CNN map))."""
        x = _one_input(x, input_ids)
        x, state = self._features(x, self.padding(x, attention_mask), token_type_ids)
        return (x, *(state[k] for k in self.head_state)) if self.head_state else x

    def _features(self, x: torch.Tensor, mask: torch.Tensor | None, token_type_ids: torch.Tensor | None,
                  box: TokenBox | None = None, maps: list | None = None) -> Carry:
        x, state = self.forward_tokens(x, token_type_ids, box=box)
        for stage in self.stages:
            x, state = stage(x, state, mask=mask, causal=self.causal, **({} if maps is None else {"maps": maps}))
        return Carry(self.norm(x), state)

    def forward_head(self, x, pre_logits: bool = False, mask: torch.Tensor | None = None):
        """The head on the last hidden states; `mask` (B, N) bool: the real tokens of a padded text batch. Where the
        head reads state, the features are (tokens, *its tensors) as `forward_features` gives them."""
        x, state = (x[0], dict(zip(self.head_state, x[1:]))) if isinstance(x, tuple) else (x, NO_STATE)
        return self.head(x, pre_logits=pre_logits, **_head_inputs(mask, state))

    def set_training_outputs(self, enable: bool = True, draw: BoxDraw | None = None) -> "Transformer":
        """Whether the training forward returns what the head declares (`spec.head.outputs()`, vspec/nn/heads.py):
        off (the default, as timm's models), `model(x)` is one logits tensor in training as in eval, and nothing is
        mixed between samples; on (the training loop's request, as timm's `set_distilled_training(True)`), a head
        with several outputs returns its tuple of `HeadOutput`, MixToken (the spec's `DenseAux.mix_token`) mixes a box
        of the token grid, drawn by `draw` (default `vspec.nn.mix_token.draw_box`, Python's `random`;
        `released_draw_box`: the release's numpy draw), and `Model.attention_maps` puts every block's maps on the
        first output. Eval is never changed. Returns the model (as `train()` does)."""
        self.training_outputs = bool(enable)
        self.draw_box = draw_box if draw is None else draw
        return self

    def forward(self, x: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, *, input_ids: torch.Tensor | None = None):
        """Images (B, C, H, W), or a text body's input_ids (B, L) [, attention_mask, token_type_ids] -> logits (B, C).

        With `set_training_outputs(True)`, in training: the head's declared outputs (vspec/nn/heads.py) and what the
        spec asks for beside them: MixToken (the head's `mixes_tokens`) mixes a box of the token grid, drawn here,
        and the head's outputs carry it; with `attention_maps` the first output carries every block's handed-on
        maps (`HeadOutput.maps`)."""
        x = _one_input(x, input_ids)
        mask = self.padding(x, attention_mask)  # once, for the blocks and the head
        head_mask = self.inputs.head_padding(x, mask)
        outputs = self.training and self.training_outputs
        box = self.draw_box(self.input_grid(x)) if outputs and self.mix_token else None
        maps = [] if outputs and self.attention_maps else None
        x, state = self._features(x, mask, token_type_ids, box, maps)
        state = {k: state[k] for k in self.head_state}  # less the maps kept for the training output
        asked = {"outputs": True} if outputs and self.head_outputs else {}
        out = self.head(x, **_head_inputs(head_mask, state), **asked, **({} if box is None else {"box": box}))
        if maps is None:
            return out
        first, *rest = as_outputs(out)
        return (first._replace(maps=tuple(maps)), *rest)

    def forward_intermediates(self, x: torch.Tensor, indices: int | Sequence[int] | None = None, norm: bool = False,
                              stop_early: bool = False, output_fmt: str | None = None, intermediates_only: bool = False,
                              return_prefix_tokens: bool = False, attention_mask: torch.Tensor | None = None,
                              token_type_ids: torch.Tensor | None = None):
        """The features after each `feature_info` entry (each block of a one-stage model, each stage
        otherwise), as timm's models give them, in forward order. indices: None (all), n (the last n) or
        a list (negative counts from the end). norm: apply the final norm to the taps of the last stage
        (where its width applies). stop_early: run no further than the last tap taken. output_fmt: NCHW
        (patch tokens as a (B, C, h, w) map; with return_prefix_tokens, (map, prefix tokens) pairs) |
        NLC (the tokens, prefix included; a text body's only form, its per-layer hidden states); None: NCHW
        for images, NLC for text. Returns (final features, intermediates) or the
        intermediates only; the final features have the final norm once the last stage was run."""
        formats = self.inputs.formats
        output_fmt = output_fmt or self.inputs.feature_format
        if output_fmt not in formats:
            raise ValueError(f"output_fmt must be {' or '.join(formats)}"
                             f"{' (a text body has no map)' if formats == ('NLC',) else ''}, got {output_fmt!r}")
        mask = self.padding(x, attention_mask)
        take = set(_take_indices(len(self.feature_info), indices))
        taps = {(f["stage"], f["index"]): k for k, f in enumerate(self.feature_info)}
        end = max(take, default=-1) if stop_early else len(self.feature_info) - 1
        grid = self.input_grid(x) if output_fmt == "NCHW" else None  # dynamic_img_size: the input's (one stage)
        feats, last_stage, reached = [], len(self.layout) - 1, -1
        x, state = self.forward_tokens(x, token_type_ids)
        for shape, stage in zip(self.layout, self.stages):
            if end < 0:
                break
            reached = shape.index
            x = x if stage.entry is None else stage.entry(x)
            for j, block in enumerate(stage.blocks):
                x, state = stage.run(block, x, state, mask, self.causal)
                k = taps.get((shape.index, j))
                if k in take:
                    y = self.norm(x) if norm and shape.index == last_stage else x
                    tokens = attrs.evolve(shape.tokens, grid=grid) if self.spec.dynamic_img_size else shape.tokens
                    feats.append(y if output_fmt == "NLC" else _as_map(y, tokens, return_prefix_tokens))
                if k == end:
                    break
            if k == end:
                break
        if intermediates_only:
            return feats
        return (self.norm(x) if reached == last_stage else x), feats

    def prune_intermediate_layers(self, indices: int | Sequence[int] = 1, prune_norm: bool = False,
                                  prune_head: bool = True) -> list[int]:
        """timm's: keep what `forward_intermediates(x, indices)` needs. Drops the blocks (one-stage model) or
        stages after the last `feature_info` entry taken, the head (`prune_head`: the model then returns its
        last tokens, as timm's with global_pool '') and the final norm (`prune_norm`); returns the kept
        indices, counted from the start (negative ones refer to the unpruned model). `feature_info` is cut to
        the kept entries; `spec`, `layout` and `parts()` still describe the whole model."""
        take = _take_indices(len(self.feature_info), indices)
        last = max(take)
        if self.head_state and not prune_head:
            raise ValueError(f"prune_intermediate_layers: the head reads the state of the last block "
                             f"({', '.join(self.head_state)}), which pruning removes: prune the head too")
        if len(self.layout) == 1:
            self.stages[0].blocks = self.stages[0].blocks[:last + 1]
        else:
            self.stages = self.stages[:last + 1]
        self.feature_info = self.feature_info[:last + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.head, self.num_classes = PrunedHead(), 0
        return take


class PrunedHead(nn.Module):
    """What `prune_intermediate_layers(prune_head=True)` leaves of the head: the tokens, unchanged."""

    def forward(self, x: torch.Tensor, pre_logits: bool = False, mask=None, state=None) -> torch.Tensor:
        return x

    def classifier(self) -> nn.Module:
        return nn.Identity()

    def reset(self, num_classes: int) -> list[nn.Module]:
        raise ValueError("reset_classifier: the head was pruned (prune_intermediate_layers); build the model again")


def example_input(spec: S.Model, batch: int = 1, *, dtype: torch.dtype | None = None,
                  generator: torch.Generator | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """A random batch that `spec`'s model takes: N(0, 1) images (B, C, H, W) in `dtype`, or a text body's token
    ids (B, seq_len), int64 whatever `dtype` says (vspec.nn.inputs)."""
    return inputs_of(spec).example(batch, dtype=dtype, generator=generator, device=device)


VisionTransformer = Transformer  # the name of the releases before text and two-branch bodies


def _head_inputs(mask: torch.Tensor | None, state: Mapping[str, torch.Tensor]) -> dict:
    """The head's keywords beside the tokens: the padding mask of a text batch, the state it reads."""
    return {**({} if mask is None else {"mask": mask}), **({"state": state} if state else {})}


def _shapes(keys: Sequence[str], state: Mapping) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple((k, tuple(state[k].shape)) for k in keys)


def _one_input(x: torch.Tensor | None, input_ids: torch.Tensor | None) -> torch.Tensor:
    """The input, given positionally or as Hugging Face's `input_ids` keyword."""
    if (x is None) == (input_ids is None):
        raise TypeError("give the input once: images or token ids positionally, or token ids as input_ids=")
    return x if input_ids is None else input_ids


def _take_indices(n: int, indices: int | Sequence[int] | None) -> list[int]:
    """timm's convention: None -> all, an int -> the last `indices`, a sequence -> those (negatives
    count from the end)."""
    if indices is None:
        return list(range(n))
    if isinstance(indices, int):
        if not 0 < indices <= n:
            raise ValueError(f"indices: the last {indices} of {n} features do not exist")
        return list(range(n - indices, n))
    out = []
    for i in indices:
        if not -n <= i < n:
            raise ValueError(f"indices: {i} is out of range for {n} features")
        out.append(i % n)
    return out


def _as_map(x: torch.Tensor, tokens: S.Tokens, with_prefix: bool):
    spatial = rearrange(x[:, tokens.prefix:], "b (h w) c -> b c h w", h=tokens.grid[0])
    return (spatial, x[:, :tokens.prefix]) if with_prefix else spatial


@torch.no_grad()
def _init_linear(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
