"""The model: an embedder, a body of stages of blocks, and a head, with the shape that ties them.

Each component checks its own rules against the tokens it will see (`check(tokens)`); the model's
validator only walks the layout and composes their errors into paths from the model root.
"""

from typing import Any, Literal

import attrs
from attrs import field, frozen

from .blocks import Block
from .errors import SpecError, check, check_pair, check_size, join, pair, show
from .kinds import KINDS, ROLES, BlockKind, EmbedderKind, EntryKind, HeadKind, of_role  # noqa: F401
from .layout import embedded, layout, received
from .vit import ClassTokenHead, PatchEmbed

__all__ = ["Model", "SHORTHAND", "Stage"]
_POS_EMBEDS = ("none", "learned", "sincos1d", "sincos2d")
_INITS = ("timm", "torch")


def _tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _check_blocks(inst, attribute, value):
    name = type(inst).__name__
    if isinstance(value, BlockKind):
        return
    if not isinstance(value, tuple) or not value:
        raise SpecError(f"{name}.block", f"must be a block or a non-empty list of blocks, got {show(value)}")
    for i, b in enumerate(value):
        if not isinstance(b, BlockKind):
            raise SpecError(f"{name}.block.{i}", f"must be a block, got {type(b).__name__}")


@frozen
class Stage:
    """`depth` blocks at width `dim`: one block repeated, or a list of `depth` blocks (each of any block kind,
    `kinds.BlockKind`). `entry`, when set, first changes the grid and the width (PatchMerging); without one the
    width cannot change."""

    depth: int = field(default=12, validator=check(int, ge=1))
    dim: int = field(default=768, validator=check(int, ge=1))
    block: BlockKind | tuple[BlockKind, ...] = field(default=Block(), converter=_tuple, validator=_check_blocks)
    entry: EntryKind | None = field(default=None, validator=check(EntryKind, optional=True))

    def __attrs_post_init__(self):
        if isinstance(self.block, tuple) and len(self.block) != self.depth:
            raise SpecError("Stage.depth",
                            f"must equal the number of listed blocks ({len(self.block)}), got {self.depth}")

    @property
    def blocks(self) -> tuple[BlockKind, ...]:
        """The stage's blocks, one per depth (a repeated block repeated)."""
        return self.block if isinstance(self.block, tuple) else (self.block,) * self.depth

    def named_blocks(self) -> list[tuple[str, BlockKind]]:
        """(path, block) once per distinct spec entry: `block` or `block.i`."""
        if isinstance(self.block, BlockKind):
            return [("block", self.block)]
        return [(f"block.{i}", b) for i, b in enumerate(self.block)]



def _check_stages(inst, attribute, value):
    if not isinstance(value, tuple) or not value:
        raise SpecError("Model.stages", f"must be a non-empty list of Stages, got {show(value)}")
    for i, s in enumerate(value):
        if not isinstance(s, Stage):
            raise SpecError(f"Model.stages.{i}", f"must be a Stage, got {type(s).__name__}")


def _check_read(keys, state, who: str) -> None:
    for key in keys:
        if key not in state:
            raise SpecError("", f"{who} reads the state {key!r}, which no part before it writes")


SHORTHAND = ("block", "depth", "dim")


@frozen(init=False)
class Model:
    """A transformer for images or text: embedder -> [class token] -> + position embedding -> stages -> final norm
    -> head.

    A one-stage (isotropic) model is written with the shorthand `block`, `depth`, `dim` (the stage's
    fields), and its JSON keeps that form; a hierarchical one lists `stages`. `pos_embed`: none |
    learned (covers class token and patches, timm) | sincos1d (fixed, over all tokens) | sincos2d
    (fixed, over the patch grid only; SimpleViT). `final_norm` applies the last block's norm kind after
    the last stage. `drop_path` is the stochastic-depth rate of the last block, ramped linearly from 0
    over all blocks of all stages. `init`: timm (ViT initialisation) | torch (PyTorch defaults).
    `causal`: every attention lets token i attend to tokens <= i only (a decoder's). `dynamic_img_size`: the model also
    takes images of other sizes (multiples of the patch) at run time, its position table resampled to their grid
    (vspec.weights.resample; timm's dynamic_img_size), where every kind declares `any_grid` (`check_dynamic`).
    `attention_maps`: the training forward also returns the attention maps each block hands on (the carried state
    its attention names, `maps_key`; Refiner's released cos_reg), one per block, for the loss
    (`vspec.nn.head_outputs.head_loss`'s n_comn); every block must hand maps on. The head's `mixes_tokens` (MixToken)
    needs an image body whose token grid runs unchanged from the embedder to the head.

    A text embedder (`TokenEmbed`) makes a language body: its tokens are a sequence that may be padded
    (img_size and in_chans do not apply), so every attention and the head honour a padding mask, kinds that
    need an image grid are refused, and the positions are the embedder's (no class token, pos_embed none).
    """

    embedder: EmbedderKind = field(default=PatchEmbed(), validator=of_role(EmbedderKind))
    stages: tuple[Stage, ...] = field(default=(Stage(),), converter=_tuple, validator=_check_stages)
    num_classes: int = field(default=1000, validator=check(int, ge=0))
    img_size: tuple[int, int] = field(default=(224, 224), converter=pair, validator=check_pair)
    in_chans: int = field(default=3, validator=check(int, ge=1))
    class_token: bool = field(default=True, validator=check(bool))
    pos_embed: Literal["none", "learned", "sincos1d", "sincos2d"] = field(
        default="learned", validator=check(str, choices=_POS_EMBEDS)
    )
    final_norm: bool = field(default=True, validator=check(bool))
    head: HeadKind = field(default=ClassTokenHead(), validator=of_role(HeadKind))
    drop_path: float = field(default=0.0, validator=check(float, ge=0, lt=1))
    init: Literal["timm", "torch"] = field(default="timm", validator=check(str, choices=_INITS))
    causal: bool = field(default=False, validator=check(bool))
    dynamic_img_size: bool = field(default=False, validator=check(bool))
    attention_maps: bool = field(default=False, validator=check(bool))

    def __init__(self, *, block: Any = None, depth: Any = None, dim: Any = None, **fields: Any):
        """`block` / `depth` / `dim` set the fields of a one-stage model's stage (also on
        `attrs.evolve` of a one-stage model); `stages` gives any body."""
        short = {k: v for k, v in zip(SHORTHAND, (block, depth, dim)) if v is not None}
        if short:
            stages = _tuple(fields.get("stages"))
            if "stages" in fields and not (isinstance(stages, tuple) and stages):
                key, given = next(iter(short)), "an empty list" if stages == () else show(fields["stages"])
                raise SpecError("Model.stages", f"{given} beside the one-stage shorthand ({key}), which would "
                                                "ignore it: give the body as block / depth / dim or as stages")
            if isinstance(stages, tuple) and len(stages) > 1:
                key = next(iter(short))
                raise SpecError(f"Model.{key}", f"the model has {len(stages)} stages: set stages.<i>.{key} instead")
            if isinstance(short.get("block"), (list, tuple)) and "depth" not in short and not stages:
                short["depth"] = len(short["block"])  # a listed stack: its length is the depth
            try:
                base = stages[0] if stages else Stage()
                fields["stages"] = (attrs.evolve(base, **short),)
            except SpecError as e:  # the stage's fields are the model's here
                raise SpecError(e.path.replace("Stage.", "Model.", 1), e.message) from None
        self.__attrs_init__(**fields)

    def __attrs_post_init__(self):
        """Rules that tie components to the shapes they see; paths run from the model root."""
        self.check_body()
        self.check_dynamic()
        try:
            self.embedder.check_input(self.img_size, self.in_chans, self.stages[0].dim)
        except SpecError as e:
            raise e.under("embedder") from None
        check_size("img_size", embedded(self).length, "the number of tokens")
        stages = layout(self)
        for stage, shape in zip(self.stages, stages):
            prefix = self.stage_path(shape.index)
            if shape.entry_in is None and shape.index > 0 and stages[shape.index - 1].tokens.dim != stage.dim:
                raise SpecError(join(prefix, "dim"), f"{stage.dim} differs from the previous stage's "
                                f"{stages[shape.index - 1].tokens.dim}, and the stage has no entry to change it")
            if stage.entry is not None:
                if shape.index == 0:
                    raise SpecError(join(prefix, "entry"), "the first stage takes the embedder's tokens as they are "
                                                          "(downsample at the start of a later stage)")
                try:
                    stage.entry.check(shape.entry_in)
                except SpecError as e:
                    raise e.under(join(prefix, "entry")) from None
            for path, block in stage.named_blocks():
                try:
                    block.check(shape.tokens)
                except SpecError as e:
                    raise e.under(join(prefix, path)) from None
        self.check_state(stages)
        self.check_training_outputs(stages)
        try:
            self.head.check(stages[-1].tokens)
        except SpecError as e:
            raise e.under("head") from None
        path, last = self.named_blocks()[-1]
        if stages[-1].tokens.prefix:  # a rule about what follows the body
            try:
                last.ffn.check_before_head(self.head)
            except SpecError as e:
                raise e.under(join(path, "ffn")) from None
        first = stages[0].tokens
        if self.pos_embed == "sincos2d" and first.dim % 4:
            raise SpecError("pos_embed", f"sincos2d needs dim divisible by 4, got {first.dim}")
        if self.pos_embed == "sincos1d" and first.dim % 2:
            raise SpecError("pos_embed", f"sincos1d needs an even dim, got {first.dim}")

    def check_state(self, stages) -> None:
        """The state carried beside the tokens (the walk of `layout.received`, a repeated block until what it writes
        stops changing): each block's rule on the state it receives, each key a block or the head reads written
        before it, the embedder's rule on the head."""

        def rule(shape, j: int, block: BlockKind, state) -> None:
            stage = self.stages[shape.index]
            listed = isinstance(stage.block, tuple)
            try:
                block.check_state(state, shape.tokens, (stage.block[j - 1] if listed else block) if j else None, j)
                _check_read(block.reads, state, f"a {block.kind} block")
            except SpecError as e:
                raise e.under(join(self.stage_path(shape.index), f"block.{j}" if listed else "block")) from None

        state = received(self, stages, rule, every=False)[-1]
        try:
            self.head.check_state(state)
            _check_read(self.head.reads, state, f"the {self.head.kind} head")
            self.embedder.check_head(self.head)
        except SpecError as e:
            raise e.under("head") from None

    def check_training_outputs(self, stages) -> None:
        """What the training forward returns beyond the head's logits: MixToken's box (the head's `mixes_tokens`)
        needs one image token grid from the embedder to the head, and `attention_maps` a map from every block."""
        if self.head.mixes_tokens:
            first, last = embedded(self), stages[-1].tokens
            if self.embedder.text or self.embedder.writes or first.grid != last.grid:
                raise SpecError("head", f"MixToken swaps a box of the embedder's token grid, and the head's token "
                                        f"logits back in it: it needs an image body whose embedder makes the grid the "
                                        f"head sees ({first.grid[0]}x{first.grid[1]}, the head's "
                                        f"{last.grid[0]}x{last.grid[1]}) and carries no state beside the tokens")
        if self.attention_maps:
            for path, block in self.named_blocks():
                if block.maps_key is None:
                    raise SpecError(join(path, "attention"), f"attention_maps returns the maps every block hands on; "
                                                             f"{block.attention.kind} attention hands none on")

    def kinds(self) -> list[tuple[str, Any]]:
        """(path, kind) of every component the body and the head hold: entries, attentions, FFNs, the head."""
        out = []
        for i, stage in enumerate(self.stages):
            if stage.entry is not None:
                out.append((join(self.stage_path(i), "entry"), stage.entry))
        for path, block in self.named_blocks():
            out += [(join(path, "attention"), block.attention), (join(path, "ffn"), block.ffn)]
        return out + [("head", self.head)]

    def check_body(self) -> None:
        """What a body's input asks of its components: a text body's tokens are a sequence, maybe padded; a
        causal body's blocks (and their attentions) honour the causal mask."""
        sequence = self.embedder.text
        if sequence:
            for name, value, plain in (("class_token", self.class_token, False), ("pos_embed", self.pos_embed, "none")):
                if value != plain:
                    raise SpecError(name, f"a text body's first token is its own class token and its embedder holds "
                                          f"the positions: set {name} = {plain!r} (the head reads the first token)")
        for path, kind in self.kinds():
            if sequence and kind.needs_grid:
                raise SpecError(path, f"{kind.kind} needs an image's token grid; a text body ({self.embedder.kind} "
                                      "embedder) is a token sequence")
        for path, block in self.named_blocks():
            try:
                block.check_masks(padding=sequence, causal=self.causal)
            except SpecError as e:
                raise SpecError(join(path, e.path), e.message + (" (a text body may be padded)" if sequence
                                                                  else "")) from None
        if sequence and not self.head.masks:
            raise SpecError("head", f"the {self.head.kind} head cannot honour a padding mask, which a text body may "
                                    "have (first_token, last_token or gap)")

    def check_dynamic(self) -> None:
        """dynamic_img_size: every kind runs on any token grid (`any_grid`); a kind built for the grid of img_size
        (windows, merging, convolutions or lookups over the grid, a CNN map) is refused by its path."""
        if not self.dynamic_img_size:
            return
        for path, kind in [("embedder", self.embedder), *self.kinds()]:
            if not kind.any_grid:
                able = ", ".join(sorted({k.kind for k in KINDS.values() if k.any_grid and k.role == kind.role}))
                raise SpecError(path, f"{kind.kind} is built for the token grid of img_size; dynamic_img_size needs "
                                      f"{kind.role} kinds that run on any grid ({able or 'none does'})")

    # ---------------------------------------------------------------- views
    @property
    def isotropic(self) -> bool:
        """One stage: written (and serialised) with the block / depth / dim shorthand."""
        return len(self.stages) == 1

    def stage_path(self, index: int) -> str:
        """The path of stage `index`'s fields: `` for a one-stage model (shorthand), else `stages.i`."""
        return "" if self.isotropic else f"stages.{index}"

    @property
    def block(self) -> BlockKind | tuple[BlockKind, ...]:
        """The block of a one-stage model (one, or the tuple of a listed stack); AttributeError with several stages."""
        if not self.isotropic:
            raise AttributeError(f"Model.block: the model has {len(self.stages)} stages; use stages[i].block")
        return self.stages[0].block

    @property
    def depth(self) -> int:
        """All blocks of all stages."""
        return sum(s.depth for s in self.stages)

    @property
    def dim(self) -> int:
        """The width of the last stage: what the head sees (timm's num_features)."""
        return self.stages[-1].dim

    @property
    def blocks(self) -> tuple[BlockKind, ...]:
        """Every block, in order over the stages."""
        return tuple(b for s in self.stages for b in s.blocks)

    def named_blocks(self) -> list[tuple[str, BlockKind]]:
        """(path, block) once per distinct spec entry: `block`, `block.i` or `stages.s.block[.i]`."""
        return [(join(self.stage_path(i), p), b) for i, s in enumerate(self.stages) for p, b in s.named_blocks()]

    @property
    def grid(self) -> tuple[int, int]:
        """The embedder's token grid."""
        return embedded(self).grid

    @property
    def num_prefix_tokens(self) -> int:
        """The tokens before the grid's: the class token's 1, else 0 (timm's name)."""
        return int(self.class_token)
