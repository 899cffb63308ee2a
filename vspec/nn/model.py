"""The model assembled from a Model spec: the transformer (images or text) over the stages of vspec/nn/blocks.py,
with timm's model API (including its feature API) and the parts that the profiler and the CLI read."""

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import attrs
import torch
from einops import rearrange
from torch import nn

from .. import spec as specs
from .._moved import moved as _moved
from ..ops import sincos_1d, sincos_2d
from ..ops.precision import bf16_stream
from ..ops.resample import resample_pos_embed
from ..spec.kinds import LOGITS
from ..spec.weights import inputs_cfg
from . import blocks
from .context import BuildContext
from .head_outputs import as_outputs
from .inputs import TokenInputs, inputs_of
from .layers import Component, make_norm
from .mix_token import BoxDraw, TokenBox, draw_box, swap_box
from .outputs import hf_output
from .vit import PrunedHead

__all__ = ["Part", "Transformer", "example_input"]


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
    `attention_mask` (B, L; 1 at real tokens, 0 at padding), `token_type_ids` and `position_ids`; padding is masked
    in every attention and in the head, and `spec.causal` makes every attention causal. Called as a Hugging Face
    model (`labels=`, `return_dict=`, `output_hidden_states=`) it returns what they do (`forward`).

    timm conventions: `forward_features`, `forward_head(x, pre_logits=False)`, `forward_intermediates`,
    `feature_info`, `num_classes`, `num_features`, `reset_classifier`, `get_classifier`,
    `no_weight_decay`; `model(x)` is the logits tensor in both modes, the head's declared training outputs come on
    request (`set_training_outputs`, as timm's `set_distilled_training`). `.spec` is the spec it was built from
    (kept in step by `reset_classifier`), `.assembly` what building it worked out from the spec once
    (`vspec.spec.Assembly`): `.layout` its stages' shapes, `.state_layout` its carried state's; `.parts()` the steps
    of its forward pass.
    """

    def __init__(self, spec: specs.Model, ctx: BuildContext, *, tie_repeats: bool = False):
        """`tie_repeats`: one module per distinct part (the assembly's keys), repeated wherever it recurs with its
        weights tied: the profiler's model (`vspec.build(spec, tie_repeats=True)`)."""
        super().__init__()
        self.spec = spec
        self.assembly = specs.assemble(spec)  # the shapes and the carried state, worked out once
        self.layout, self.state_layout = self.assembly.stages, self.assembly.state
        self.num_classes = spec.num_classes
        self.num_features = spec.dim
        self.embed_dim = self.layout[0].tokens.dim
        self.num_prefix_tokens = spec.num_prefix_tokens
        self.inputs, self.causal = inputs_of(spec), spec.causal
        self.starts = bool(spec.embedder.writes)
        self.head_state = tuple(k for k in self.state_layout[-1] if k in spec.head.reads)  # keys
        self.mix_token, self.attention_maps = spec.head.mixes_tokens, spec.attention_maps  # training outputs
        self.training_outputs, self.draw_box = False, draw_box  # set_training_outputs: the loop's request
        self.head_outputs = spec.head.outputs() != LOGITS  # the head returns HeadOutputs when they are asked for
        first = self.assembly.tokens  # what the embedder produces
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
        built: dict[Hashable, nn.Module] | None = {} if tie_repeats else None  # the tied parts, across stages
        self.stages = nn.ModuleList(blocks.Stage(s, shape, ctx, self.assembly, rates, built)
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
        keys = self.assembly.keys
        for shape, stage, stage_spec in zip(self.layout, self.stages, self.spec.stages):
            i, t = shape.index, shape.tokens
            if stage.entry is not None:
                e = shape.entry_in
                out.append(Part(f"stages.{i}.entry", "entry", i, None, stage.entry, (e.length, e.dim),
                                self.assembly.entry_keys[i]))
            out += [Part(f"stages.{i}.blocks.{j}", "block", i, j, block, (t.length, t.dim), keys[shape.first + j],
                         state_in=_shapes(spec.reads, self.state_layout[shape.first + j]))
                    for j, (block, spec) in enumerate(zip(stage.blocks, stage_spec.blocks))]
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
        """Record the inputs of the weights the model now holds (a dict as timm's)."""
        self.__dict__["_pretrained_cfg"] = cfg

    default_cfg = pretrained_cfg

    # ---------------------------------------------------------------- what a Hugging Face user reaches for
    @property
    def device(self) -> torch.device:
        """The first parameter's device (the first buffer's where it has none), as HF's models say it."""
        return _first_tensor(self, floating=False).device

    @property
    def dtype(self) -> torch.dtype:
        """The first floating-point parameter's dtype (buffer's where it has none), as HF's models say it."""
        return _first_tensor(self, floating=True).dtype

    def num_parameters(self, only_trainable: bool = False, exclude_embeddings: bool = False) -> int:
        """HF's count: the parameters, a shared one once; `only_trainable`: those that require grad;
        `exclude_embeddings`: less the embedding tables' weights (nn.Embedding: a text body's words, positions, token
        types)."""
        tables = {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)} if exclude_embeddings else ()
        return sum(p.numel() for p in self.parameters()
                   if (p.requires_grad or not only_trainable) and id(p) not in tables)

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
        """timm's: the parameters kept out of weight decay (class token, position table, the components' own)."""
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
        """timm's: a new classifier of `num_classes` outputs (0: none), initialised as the spec's `init` says."""
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
                       box: TokenBox | None = None, mask: torch.Tensor | None = None,
                       position_ids: torch.Tensor | None = None) -> blocks.Carry:
        """Images (or token ids) -> the first stage's input (embedder, class token, position embedding), and the state
        the embedder starts beside the tokens (its kind's `writes`); with a MixToken `box`, the embedder's tokens
        in it swapped with the batch-flipped sample's first (vspec.nn.mix_token). A text body's positions:
        `position_ids`, or its default for the padding `mask` (vspec.nn.inputs.TokenInputs.positions)."""
        out, grid = self.inputs.embed(self.embedder, x, token_type_ids, position_ids, mask)
        # an embedder that writes state: (tokens, {key: tensor})
        x, state = out if self.starts else (out, blocks.NO_STATE)
        return blocks.Carry(self._prepend(x if box is None else swap_box(x, box), grid), state)

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
                         token_type_ids: torch.Tensor | None = None, *, input_ids: torch.Tensor | None = None,
                         position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The last hidden states (B, N, dim), after the final norm; (tokens, *the state the head reads) where it reads
        some (`head_state`'s order; Conformer's: (tokens, CNN map))."""
        x = _one_input(x, input_ids)
        x, state = self._features(x, self.padding(x, attention_mask), token_type_ids, position_ids=position_ids)
        return (x, *(state[k] for k in self.head_state)) if self.head_state else x

    def _features(self, x: torch.Tensor, mask: torch.Tensor | None, token_type_ids: torch.Tensor | None,
                  box: TokenBox | None = None, maps: list | None = None, position_ids: torch.Tensor | None = None,
                  hidden: list | None = None) -> blocks.Carry:
        """The stage loop: the final features and the state; `maps`, `hidden`: lists that each block's attention maps
        and output tokens are appended to, `hidden` the embedding output first and the final features last; all in the
        embedding's dtype, the stages' stream in bf16 where `vspec.ops.precision.bf16_stream` says so."""
        x, state = self.forward_tokens(x, token_type_ids, box=box, mask=mask, position_ids=position_ids)
        dtype, x = x.dtype, (x.to(torch.bfloat16) if bf16_stream(x) else x)
        if hidden is not None:
            hidden.append(x)
        for stage in self.stages:
            x, state = stage(x, state, mask=mask, causal=self.causal, **({} if maps is None else {"maps": maps}),
                             **({} if hidden is None else {"hidden": hidden}))
        x = self.norm(x).to(dtype)
        if hidden is not None:
            hidden[:] = [h.to(dtype) for h in hidden[:-1]] + [x]
        return blocks.Carry(x, state)

    def forward_head(self, x, pre_logits: bool = False, mask: torch.Tensor | None = None):
        """The head on the last hidden states; `mask` (B, N) bool: the real tokens of a padded text batch. Where the
        head reads state, the features are (tokens, *its tensors) as `forward_features` gives them."""
        x, state = (x[0], dict(zip(self.head_state, x[1:]))) if isinstance(x, tuple) else (x, blocks.NO_STATE)
        return self.head(x, pre_logits=pre_logits, **_head_inputs(mask, state))

    def set_training_outputs(self, enable: bool = True, draw: BoxDraw | None = None) -> "Transformer":
        """Whether the training forward returns what the head declares (`spec.head.outputs()`,
        vspec/nn/head_outputs.py): off (the default, as timm's models), `model(x)` is one logits tensor in training as
        in eval, and nothing is mixed between samples; on (the training loop's request, as timm's
        `set_distilled_training(True)`), a head with several outputs returns its tuple of `HeadOutput`, MixToken (the
        spec's `DenseAux.mix_token`) mixes a box of the token grid, drawn by `draw` (default
        `vspec.nn.mix_token.draw_box`, Python's `random`; `released_draw_box`: the release's numpy draw), and
        `Model.attention_maps` puts every block's maps on the first output. Eval is never changed. Returns the model (as
        `train()` does)."""
        self.training_outputs = bool(enable)
        self.draw_box = draw_box if draw is None else draw
        return self

    def forward(self, x: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, *, input_ids: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                return_dict: bool | None = None, output_hidden_states: bool | None = None):
        """Images (B, C, H, W), or a text body's input_ids (B, L) [, attention_mask, token_type_ids, position_ids
        (B, L) or (1, L)] -> logits (B, C).

        As a Hugging Face model, with `labels`, `return_dict=True` or `output_hidden_states=True`: a
        `vspec.nn.outputs.ModelOutput` of loss (with `labels`: the head's, by HF's `problem_type` rule,
        `vspec.nn.outputs.sequence_loss`), logits and hidden_states (`output_hidden_states`: depth + 1 tensors, the
        embedding output, then each block's output, the last one the final features, after the final norm, as HF's
        GPT-2 gives it); with `return_dict=False`, the tuple of the present ones. Such a call asks for no training
        outputs.

        With `set_training_outputs(True)`, in training: the head's declared outputs (vspec/nn/head_outputs.py) and what
        the spec asks for beside them: MixToken (the head's `mixes_tokens`) mixes a box of the token grid, drawn here,
        and the head's outputs carry it; with `attention_maps` the first output carries every block's handed-on
        maps (`HeadOutput.maps`)."""
        x = _one_input(x, input_ids)
        hf = labels is not None or return_dict is not None or bool(output_hidden_states)
        mask = self.padding(x, attention_mask)  # once, for the blocks and the head
        head_mask = self.inputs.head_padding(x, mask)
        outputs = self.training and self.training_outputs and not hf
        box = self.draw_box(self.input_grid(x)) if outputs and self.mix_token else None
        maps = [] if outputs and self.attention_maps else None
        hidden = [] if output_hidden_states else None
        x, state = self._features(x, mask, token_type_ids, box, maps, position_ids, hidden)
        state = {k: state[k] for k in self.head_state}  # less the maps kept for the training output
        asked = {"outputs": True} if outputs and self.head_outputs else {}
        out = self.head(x, **_head_inputs(head_mask, state), **asked, **({} if box is None else {"box": box}))
        if hf:
            return hf_output(out, labels, hidden, return_dict, self.num_classes)
        if maps is None:
            return out
        first, *rest = as_outputs(out)
        return (first._replace(maps=tuple(maps)), *rest)

    def forward_intermediates(self, x: torch.Tensor, indices: int | Sequence[int] | None = None, norm: bool = False,
                              stop_early: bool = False, output_fmt: str | None = None, intermediates_only: bool = False,
                              return_prefix_tokens: bool = False, attention_mask: torch.Tensor | None = None,
                              token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None):
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
        x, state = self.forward_tokens(x, token_type_ids, mask=mask, position_ids=position_ids)
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


def example_input(spec: specs.Model, batch: int = 1, *, dtype: torch.dtype | None = None,
                  generator: torch.Generator | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """A random batch that `spec`'s model takes: N(0, 1) images (B, C, H, W) in `dtype`, or a text body's token
    ids (B, seq_len), int64 whatever `dtype` says (vspec.nn.inputs).

    Args:
        spec: the model's spec.
        batch: the batch size B.
        dtype: the images' dtype; None: torch's default.
        generator: the random generator; None: torch's global one.
        device: where the batch is made; None: torch's default device.
    """
    return inputs_of(spec).example(batch, dtype=dtype, generator=generator, device=device)


def _head_inputs(mask: torch.Tensor | None, state: Mapping[str, torch.Tensor]) -> dict:
    """The head's keywords beside the tokens: the padding mask of a text batch, the state it reads."""
    return {**({} if mask is None else {"mask": mask}), **({"state": state} if state else {})}


def _first_tensor(model: nn.Module, floating: bool) -> torch.Tensor:
    for t in (*model.parameters(), *model.buffers()):
        if t.is_floating_point() or not floating:
            return t
    raise ValueError("the model holds no parameters or buffers to have a device or dtype")


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


def _as_map(x: torch.Tensor, tokens: specs.Tokens, with_prefix: bool):
    spatial = rearrange(x[:, tokens.prefix:], "b (h w) c -> b c h w", h=tokens.grid[0])
    return (spatial, x[:, :tokens.prefix]) if with_prefix else spatial


@torch.no_grad()
def _init_linear(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)


def __getattr__(name: str):  # the blocks moved to vspec.nn.blocks; VisionTransformer, Transformer's old name
    return _moved(__name__, name)
