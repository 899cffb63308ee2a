"""Conformer (Peng et al., ICCV 2021): a CNN branch beside the transformer branch, coupled at every block.

A two-branch body is the block contract's carried state with one key, "conv": every block takes and returns the
tokens and the CNN map (`vspec.nn.blocks.Carry(x, state)`, state {"conv": map}). Three parts state it:
- `ConformerStem`, the embedder that yields both: the stem map's first bottleneck (the CNN branch) and the
  patch tokens (the transformer branch);
- `CoupledBlock(conv=ConvBranch(...))`, a block kind with the CNN side of one block and its feature-coupling
  units (FCUs): a bottleneck, FCUDown (map -> tokens, added to the block's input), the transformer block, FCUUp
  (tokens -> map, added to the fusion bottleneck's 3x3 input); a block of another kind hands the map on unchanged;
- `ConformerHead`, two classifiers: the map's average (conv logits) and a head on the tokens (trans logits).
The maps' shapes are worked out by `layout.state_layout` from the kinds' `state` / `state_out`.
"""

from collections.abc import Mapping
from typing import Any, ClassVar

from attrs import field, frozen

from ...spec.blocks import Block
from ...spec.errors import SpecError, check
from ...spec.kinds import ROLES, AttentionKind, BlockKind, EmbedderKind, HeadKind, Output, of_role
from ...spec.layout import Tokens, state_layout
from ...spec.vit import ClassTokenHead, Norm

__all__ = ["ConformerHead", "ConformerStem", "ConvBranch", "ConvMap", "CoupledBlock"]

BRANCH_NORM = Norm("batchnorm", 1e-6)
CONV = "conv"  # the state key of the CNN map


@frozen
class ConvMap:
    """A two-branch body's CNN map: `chans` channels on a `grid` (height, width); its state `shape` (C, H, W)."""

    chans: int
    grid: tuple[int, int]

    @property
    def shape(self) -> tuple[int, int, int]:
        """(channels, height, width)."""
        return (self.chans, *self.grid)

    def __str__(self) -> str:
        return f"{self.grid[0]}x{self.grid[1]} map x {self.chans}"


def conv_layout(model) -> tuple[ConvMap, ...]:
    """The CNN map each block receives, in order, then the head's; () for a one-branch body (the previous release's
    `vspec.spec.conv_layout`; `state_layout` gives every key).

    Args:
        model: the model's spec.
    """
    return tuple(s[CONV] for s in state_layout(model)) if CONV in model.embedder.writes else ()


def _kinds(role: str, key: str, side: str) -> str:
    """The registered kinds of `role` that read or write (`side`) the state `key`."""
    return ", ".join(k.kind for k in ROLES[role] if key in getattr(k, side)) or "none is registered"


@frozen
class ConformerStem(EmbedderKind):
    """conv 7x7/2 (`stem` channels, no bias) -> BatchNorm (eps 1e-5) -> ReLU -> maxpool 3/2: a map at stride 4,
    read twice: by the CNN branch's first bottleneck (stem -> `width` channels, projected residual; its
    BatchNorms `norm`), and by a (p/4) x (p/4) convolution with stride p/4, p = `patch_size`, to the tokens."""

    kind: ClassVar[str] = "conformer_stem"
    writes: ClassVar[tuple[str, ...]] = (CONV,)
    patch_size: int = field(default=16, validator=check(int, ge=4))
    stem: int = field(default=64, validator=check(int, ge=1))
    width: int = field(default=64, validator=check(int, ge=4))
    norm: Norm = field(default=BRANCH_NORM, validator=check(Norm))

    def check_input(self, img_size: tuple[int, int], in_chans: int, dim: int) -> None:
        """Refuse a patch size, image size, width or norm the stem cannot take."""
        if self.patch_size % 4:
            raise SpecError("patch_size", f"{self.patch_size} is not a multiple of 4 (the stem's map is at stride 4)")
        for axis, size in zip(("height", "width"), img_size):
            if size % self.patch_size:
                raise SpecError("patch_size", f"{self.patch_size} does not divide the image {axis} {size}")
        if self.width % 4:
            raise SpecError("width", f"{self.width} is not a multiple of 4 (a bottleneck's middle is width / 4)")
        if self.norm.kind != "batchnorm":
            raise SpecError("norm.kind", f"{self.norm.kind}: the CNN branch's norm is batchnorm")

    def state(self, img_size: tuple[int, int]) -> dict[str, Any]:
        """The CNN branch's map: `width` channels at stride 4."""
        return {CONV: ConvMap(self.width, (img_size[0] // 4, img_size[1] // 4))}

    def check_head(self, head: HeadKind) -> None:
        """Refuse a head that does not read the CNN map."""
        if CONV not in head.reads:
            raise SpecError("", f"a {self.kind} embedder's CNN map must reach a head that reads it "
                                f"({_kinds('head', CONV, 'reads')})")

    def map_elements(self, img_size: tuple[int, int], in_chans: int, tokens: Tokens) -> int:
        """Twice the elements of the 7x7/2 conv's output, the stem's largest map (for the memory estimate)."""
        return 2 * self.stem * (img_size[0] // 2) * (img_size[1] // 2)


@frozen
class ConvBranch:
    """The CNN side of a Conformer block (ConvTransBlock): a bottleneck to `width` channels (3x3 stride `stride`;
    a projected residual when the width or the grid changes), then FCUDown: its middle map (width / 4) -> 1x1
    conv -> avgpool `down` -> LayerNorm -> GELU, the class token prepended, added to the block's tokens (so the
    class token enters doubled). After the transformer block, `med_blocks` bottlenecks, then FCUUp: patch tokens
    -> 1x1 conv -> BatchNorm -> ReLU -> nearest upsample x `down`, added to the input of the fusion bottleneck's
    3x3 conv (stride `fusion_stride`: 2 in the released last block, with a projected residual)."""

    width: int = field(validator=check(int, ge=4))
    stride: int = field(default=1, validator=check(int, choices=(1, 2)))
    down: int = field(default=1, validator=check(int, ge=1))
    fusion_stride: int = field(default=1, validator=check(int, choices=(1, 2)))
    med_blocks: int = field(default=0, validator=check(int, ge=0))
    norm: Norm = field(default=BRANCH_NORM, validator=check(Norm))

    def __attrs_post_init__(self):
        if self.width % 4:
            raise SpecError("ConvBranch.width", f"{self.width} is not a multiple of 4 (the middle map is width / 4)")
        if self.norm.kind != "batchnorm":
            raise SpecError("ConvBranch.norm.kind", f"{self.norm.kind}: the CNN branch's norm is batchnorm")

    def mid(self, before: ConvMap) -> ConvMap:
        """The middle map of its first bottleneck, which FCUDown reads and FCUUp writes back to."""
        return ConvMap(self.width // 4, (-(-before.grid[0] // self.stride), -(-before.grid[1] // self.stride)))

    def output(self, before: ConvMap) -> ConvMap:
        """The map it hands on: `width` channels, the middle grid after the fusion stride."""
        g = self.mid(before).grid
        return ConvMap(self.width, (-(-g[0] // self.fusion_stride), -(-g[1] // self.fusion_stride)))

    def check(self, before: ConvMap, tokens: Tokens, attention: AttentionKind) -> None:
        """The map pooled by `down` must be the token grid; the attention must take a class token and the
        map's pooled grid as plain tokens."""
        mid = self.mid(before).grid
        if mid[0] % self.down or mid[1] % self.down or (mid[0] // self.down, mid[1] // self.down) != tokens.grid:
            raise SpecError("down", f"the {mid[0]}x{mid[1]} map pooled by {self.down} is not the {tokens.grid[0]}x"
                                    f"{tokens.grid[1]} token grid")
        if not tokens.prefix:
            raise SpecError("", "FCUDown prepends the class token: the model needs class_token = true")
        if attention.needs_grid:
            raise SpecError("", f"{attention.kind} attention reads an image's token grid; a coupled block's tokens "
                                "are a class token and the pooled map (use an attention over all tokens)")


@frozen
class CoupledBlock(Block):
    """Conformer's ConvTransBlock: a pre-norm transformer block coupled with its CNN side `conv` (a `ConvBranch`),
    which takes the CNN map the block before it handed on and hands on the one it makes."""

    kind: ClassVar[str] = "coupled"
    conv: ConvBranch = field(kw_only=True, validator=check(ConvBranch))

    @property
    def reads(self) -> tuple[str, ...]:
        """The state keys it reads: its attention's and the CNN map."""
        return (*self.attention.reads, CONV)

    @property
    def writes(self) -> tuple[str, ...]:
        """The state keys it writes: its attention's and the CNN map."""
        return (*self.attention.writes, CONV)

    def check_state(self, state: Mapping[str, Any], tokens: Tokens, before: BlockKind | None, index: int) -> None:
        """A block's checks, then a CNN map in `state` that its CNN side takes."""
        Block.check_state(self, state, tokens, before, index)
        if CONV not in state:
            raise SpecError("", f"a {self.kind} block takes a CNN map, which needs an embedder that yields one "
                                f"({_kinds('embedder', CONV, 'writes')})")
        try:
            self.conv.check(state[CONV], tokens, self.attention)
        except SpecError as e:
            raise e.under("conv") from None

    def state_out(self, state: Mapping[str, Any], tokens: Tokens) -> dict[str, Any]:
        """The state after the block: its attention's and the CNN map its CNN side makes."""
        return {**Block.state_out(self, state, tokens), CONV: self.conv.output(state[CONV])}


@frozen
class ConformerHead(HeadKind):
    """Conformer's two classifiers: `conv` logits = Linear(average of the CNN map), `trans` logits = the `tokens`
    head (class token by default) on the tokens after `norm` (the released trans_norm, eps 1e-5). Training
    returns both, each of weight 1/2 (the mean of the two losses); eval returns their sum."""

    kind: ClassVar[str] = "conformer"
    reads: ClassVar[tuple[str, ...]] = (CONV,)
    tokens: HeadKind = field(default=ClassTokenHead(), validator=of_role(HeadKind))
    norm: Norm = field(default=Norm(eps=1e-5), validator=check(Norm))

    def check_state(self, state: Mapping[str, Any]) -> None:
        """Refuse a model whose embedder hands no CNN map."""
        if CONV not in state:
            raise SpecError("", f"the {self.kind} head reads a CNN map, which only a two-branch embedder "
                                f"({_kinds('embedder', CONV, 'writes')}) yields")

    def check(self, tokens: Tokens) -> None:
        """Refuse a conformer head as the token head, then the token head's own checks."""
        if isinstance(self.tokens, ConformerHead):
            raise SpecError("tokens", "a conformer head's token head reads tokens only (not another conformer head)")
        try:
            self.tokens.check(tokens)
        except SpecError as e:
            raise e.under("tokens") from None

    def outputs(self) -> tuple[Output, ...]:
        """conv (weight 1/2), then the token head's outputs as trans_<name>, their weights halved."""
        return (Output("conv", "sample", 0.5),
                *(Output(f"trans_{o.name}", o.target, 0.5 * o.weight) for o in self.tokens.outputs()))

    def working_set(self, tokens: Tokens, classes: int) -> int:
        """The elements the head holds at once: the tokens and their norm, the token head's, the conv logits."""
        return 2 * tokens.length * tokens.dim + self.tokens.working_set(tokens, classes) + classes
