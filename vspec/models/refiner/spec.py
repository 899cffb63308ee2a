"""Refiner (Zhou et al., "Refiner: refining self-attention for vision transformers"): attention
expansion (Sec. 3.2), distributed local attention (DLA, Sec. 3.3) and reduction (Sec. 3.4) of the
attention maps, maps handed from block to block (appendix B.4, Table 13) and Refined-ViT's adjusted blocks (its
CNN patch stem, which LV-ViT shares, is the core's `vspec.spec.ConvStem`). The released code's forms
(Refined-ViT) sit beside the paper's, each named.
"""

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from attrs import field, frozen

from ...spec.blocks import Block
from ...spec.errors import SpecError, check, check_size
from ...spec.kinds import AttentionKind
from ...spec.layout import StateShape, Tokens
from ...spec.stems import ConvStem  # noqa: F401 - Refined-ViT's stem, in the core since LV-ViT shares it
from ...spec.vit import MLP, MultiHead, Norm

__all__ = ["AdjustedBlock", "Refine", "RefinerAttention"]

MAPS = "maps"  # the state key of the attention maps handed from block to block (`RefinerAttention.maps_key`)
CONSTRAINTS = ("none", "spatial", "row_col")
FORMS = ("paper", "released")


@frozen
class Refine:
    """What Refiner does to the H attention maps of a block (Fig. 3a), in three steps:

    expansion (Sec. 3.2): a linear map of the H maps to H' = `expansion` x H maps (1 x 1 conv over
    heads); with expansion 1 it is talking-heads attention. DLA (Sec. 3.3): a `kernel` x `kernel`
    head-wise convolution of each expanded map (0: no DLA; Fig. 6 varies the size), under a
    `constraint` (Table 4): none (the map as an N x N image, what Refiner does) | spatial (each query's
    row of the map laid on the token grid, conv over the keys' 2-D neighbours; prefix keys untouched) |
    row_col (a 1-D conv along the keys plus one along the queries). reduction (Sec. 3.4): a linear map
    back to H maps; without it (Table 3) the H' maps aggregate H' value heads of head_dim each.
    `expand` false leaves the maps as they are, no linear map over the heads at all (expansion 1, no
    reduction): DLA on the attention maps alone (Table 2).

    `form`: paper (the three steps, linear, no bias: Fig. 3a) | released (Refined-ViT's DLA
    "conv_exapnd": 1x1 conv H -> rH + BN + ReLU6, depthwise k x k + BN + ReLU6, 1x1 conv rH -> H + BN,
    plus the incoming maps; then a BatchNorm over the H maps; constraint none, reduction on)."""

    expansion: int = field(default=3, validator=check(int, ge=1, le=64))
    kernel: int = field(default=3, validator=check(int, ge=0, le=63))
    constraint: Literal["none", "spatial", "row_col"] = field(default="none", validator=check(str, choices=CONSTRAINTS))
    reduction: bool = field(default=True, validator=check(bool))
    form: Literal["paper", "released"] = field(default="paper", validator=check(str, choices=FORMS))
    expand: bool = field(default=True, validator=check(bool))

    def __attrs_post_init__(self):
        if not self.expand and (self.expansion != 1 or self.reduction or self.form == "released"):
            raise SpecError("Refine.expand", "false keeps the H maps without a linear map over the heads: it needs "
                                             "expansion 1, reduction false and the paper form")
        if self.form == "released":
            if not self.kernel or self.constraint != "none" or not self.reduction:
                raise SpecError("Refine.form", "the released DLA has a kernel, no constraint and the reduction "
                                               "(kernel >= 1, constraint 'none', reduction true)")

    def maps_out(self, heads: int) -> int:
        """How many maps leave the pipeline: H with the reduction, H' without."""
        return heads if self.reduction else heads * self.expansion

    def check(self, tokens: Tokens, heads: int) -> None:
        """Refuse an expansion, kernel or constraint the heads and tokens cannot take."""
        check_size("expansion", heads * self.expansion, f"the expanded maps {self.expansion} x {heads} heads")
        if self.kernel > tokens.length:
            raise SpecError("kernel", f"{self.kernel} exceeds the {tokens.length} tokens of each map")
        if self.constraint == "spatial" and self.kernel > min(tokens.grid):
            raise SpecError("kernel", f"{self.kernel} exceeds the {tokens.grid[0]}x{tokens.grid[1]} token grid "
                                      "that the spatial constraint convolves over")


@frozen
class RefinerAttention(MultiHead):
    """Self-attention whose maps A = softmax(q k^T * scale) (per head, N x N) are materialised, may be
    refined (`refine`, a Refine; None: not refined) and handed to the next block, which may reuse them.

    reuse: take the previous block's maps instead of computing them: the block projects values only,
    no q, k (Table 13; Refined-ViT's "shared" blocks). It hands on the maps it received, unchanged, so
    one map serves the next n blocks. A block that computes its maps hands on what it aggregates with
    (refined, if it refines). add_incoming: A = softmax(q k^T * scale) + scale x the previous block's
    maps (Refined-ViT's compute blocks). A block that does either needs the previous block of its stage
    to be a RefinerAttention with as many heads; the model checks it. The maps travel as the carried state
    "maps" (B, H, N, N) (`vspec.nn.blocks.Carry`): every RefinerAttention writes them, a block that takes them
    reads them.

    form: paper | released (Refined-ViT: a reusing block's refined maps multiplied by scale; its q and k
    each scaled by sqrt(scale) are computed as scale on q, equal up to rounding). `refine`'s own form says
    which DLA it is.
    Without refine, reuse or add_incoming, and when no later block takes its maps, the block runs on
    F.scaled_dot_product_attention like MHSA. `projections` (MSF's roles) are not available here."""

    kind: ClassVar[str] = "refiner"
    writes: ClassVar[tuple[str, ...]] = (MAPS,)
    maps_key: ClassVar[str] = MAPS
    refine: Refine | None = field(default=None, validator=check(Refine, optional=True))
    reuse: bool = field(default=False, validator=check(bool))
    add_incoming: bool = field(default=False, validator=check(bool))
    form: Literal["paper", "released"] = field(default="paper", validator=check(str, choices=FORMS))

    masks: ClassVar[bool] = True
    causal: ClassVar[bool] = True

    @property
    def consumes_maps(self) -> bool:
        """Whether it reads the incoming maps (reused or added)."""
        return self.reuse or self.add_incoming

    @property
    def reads(self) -> tuple[str, ...]:
        """(MAPS,) where it consumes the incoming maps, else ()."""
        return (MAPS,) if self.consumes_maps else ()

    def state_out(self, state: Mapping[str, Any], tokens: Tokens) -> dict[str, Any]:
        """The maps it hands on, (maps_handed_on, N, N) per sample."""
        return {MAPS: StateShape((self.maps_handed_on, tokens.length, tokens.length))}

    def check_masks(self, padding: bool, causal: bool) -> None:
        """The maps honour padding and causal masks through the paper's linear pipeline (masked softmax, the map
        masked by m_i m_j before the DLA and by m_j after it; a causal DLA reads no later query's row). The
        released DLA's BatchNorms would take statistics over padding, and the spatial constraint lays the keys
        on an image grid: both are refused."""
        if not (padding or causal) or self.refine is None:
            return
        if self.refine.form == "released":
            raise SpecError("refine.form", "the released DLA's BatchNorms take statistics over every position, "
                                           "padding too: use the paper form with masks")
        if self.refine.constraint == "spatial":
            raise SpecError("refine.constraint", "spatial lays each query's keys on an image's token grid; a "
                                                 "sequence takes none or row_col")

    @property
    def maps_used(self) -> int:
        """How many maps aggregate values: the value heads."""
        return self.heads if self.refine is None else self.refine.maps_out(self.heads)

    def role_widths(self, dim: int) -> dict[str, int]:
        """q and k inner wide (none when the block reuses the incoming maps), the values one head_dim per
        map used (`maps_used`)."""
        inner = self.inner_dim(dim)
        return ({} if self.reuse else {"Q": inner, "K": inner}) | {"V": self.maps_used * (inner // self.heads)}

    @property
    def maps_handed_on(self) -> int:
        """How many maps the block hands on: those it received (reuse) or those it aggregates with."""
        return self.heads if self.reuse else self.maps_used

    def check(self, tokens: Tokens) -> None:
        """Refuse projections, reuse with add_incoming, and sizes the maps cannot take; then the refine's checks."""
        if self.projections is not None:
            raise SpecError("projections", "tied or grouped projections are not available on refiner attention")
        if self.reuse and self.add_incoming:
            raise SpecError("add_incoming", "a block that reuses the incoming maps has no maps of its own to add "
                                            "them to")
        MultiHead.check(self, tokens)
        check_size("heads", tokens.length**2 * self.heads, f"the {self.heads} maps of {tokens.length} x "
                                                            f"{tokens.length} tokens")
        if self.refine is not None:
            try:
                self.refine.check(tokens, self.heads)
            except SpecError as e:
                raise e.under("refine") from None

    def scores(self, tokens: Tokens) -> int:
        """The maps; refined, the expanded maps before and after DLA too."""
        maps = MultiHead.scores(self, tokens)
        return maps if self.refine is None else maps * 2 * self.refine.expansion

    def check_state(self, state: Mapping[str, Any], tokens: Tokens, before: AttentionKind | None,
                    index: int) -> None:
        """A block that takes maps (reuse, add_incoming) follows, in its stage, a block that hands on as many."""
        if not self.consumes_maps:
            return
        if before is None:
            raise SpecError("", f"block {index} needs the attention maps of the block before it, but it is the first "
                                "of its stage (maps are handed on within a stage)")
        if MAPS not in before.writes:
            raise SpecError("", f"block {index} needs the attention maps of block {index - 1}, whose {before.kind} "
                                "attention hands none on (make it refiner attention)")
        if before.maps_handed_on != self.heads:
            raise SpecError("", f"block {index} takes {self.heads} maps (its heads), block {index - 1} hands on "
                                f"{before.maps_handed_on}")

    def check_keys(self, tokens: Tokens) -> None:
        """MultiHead's rule (at least 2 keys per query) for a block that computes its maps; a reusing block
        has no query or key weights (the block whose maps it reuses sees the same tokens and is held to it)."""
        if not self.reuse:
            MultiHead.check_keys(self, tokens)


@frozen
class AdjustedBlock(Block):
    """Refined-ViT's pre-norm block with adjusted branches: each branch reads norm(a x) and adds f / a, a =
    `adjust_ratio` (the released code's; 0.5: x + 2 attn(LN(x / 2)), 1: the plain pre-norm block)."""

    kind: ClassVar[str] = "adjusted"
    adjust_ratio: float = field(default=0.5, validator=check(float, gt=0))


def released_attention(heads: int, share: bool, first: bool, transform: bool = False, head_expand: int = 3,
                       qkv_bias: bool = True, scale: float | None = None,
                       attn_drop: float = 0.0) -> RefinerAttention:
    """A Refined-ViT block's attention as the released constructor builds it: a shared block (`share`)
    reuses the incoming maps and refines them (DLA expansion 3 in every released block, whatever
    `head_expand` says); a compute block adds scale x the incoming maps (all but the `first`) and, with
    `transform` (`apply_transform`, on in no released factory), refines its own maps with `head_expand`.
    `scale` None is head_dim ** -0.5 (the released `qk_scale or head_dim ** -0.5`).

    Args:
        heads: the attention's heads.
        share: whether the block reuses the incoming maps.
        first: whether it is the first block (no incoming maps).
        transform: the released `apply_transform`.
        head_expand: the DLA's expansion of a compute block with `transform`.
        qkv_bias: whether q, k, v have a bias.
        scale: the logits' factor; None: head_dim ** -0.5.
        attn_drop: attention dropout.
    """
    common = dict(heads=heads, qkv_bias=qkv_bias, form="released", scale=scale, attn_drop=attn_drop)
    if share:
        return RefinerAttention(**common, reuse=True, refine=Refine(expansion=3, form="released"))
    refine = Refine(expansion=head_expand, form="released") if transform else None
    return RefinerAttention(**common, refine=refine, add_incoming=not first)


def released_blocks(pattern: Sequence[bool], heads: int, transform: Sequence[bool] | None = None,
                    head_expand: int = 3, qkv_bias: bool = True, mlp_ratio: float = 3.0, scale: float | None = None,
                    attn_drop: float = 0.0, norm_eps: float = 1e-6) -> tuple[AdjustedBlock, ...]:
    """Refined-ViT's blocks: `pattern[i]` True for a shared block (the released factories alternate
    [False, True]), LayerNorm (eps 1e-6 in every factory), x + 2 f(LN(x / 2)), an MLP (ratio 3) with
    output scale 1e-5.

    Args:
        pattern: per block, whether it shares (reuses) the incoming maps.
        heads: each attention's heads.
        transform: per block, the released `apply_transform`; None: all False.
        head_expand: `released_attention`'s.
        qkv_bias: whether q, k, v have a bias.
        mlp_ratio: the MLP's width over the token width.
        scale: the logits' factor; None: head_dim ** -0.5.
        attn_drop: attention dropout.
        norm_eps: the LayerNorms' eps.
    """
    transform = transform or [False] * len(pattern)
    if len(transform) != len(pattern):
        raise SpecError("block", f"{len(pattern)} blocks but {len(transform)} apply_transform flags")
    ffn = MLP(ratio=float(mlp_ratio), layer_scale=1e-5)
    return tuple(AdjustedBlock(attention=released_attention(heads, share, i == 0, t, head_expand, qkv_bias, scale,
                                                            attn_drop),
                               ffn=ffn, norm=Norm(eps=norm_eps), adjust_ratio=0.5)
                 for i, (share, t) in enumerate(zip(pattern, transform)))
