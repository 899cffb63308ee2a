"""DHVT (Lu et al., "Bridging the gap between vision transformers and convolutional neural networks on
small datasets"): the SOPE embedder, the DAFF feed-forward and head tokens, the block kind around them."""

from typing import ClassVar, Literal

import attrs
from attrs import field, frozen

from ...spec.blocks import Block
from ...spec.errors import SpecError, check, check_size
from ...spec.kinds import FFNKind
from ...spec.layout import Tokens
from ...spec.vit import Norm, Patchify, check_hidden

__all__ = ["DAFF", "HeadTokenBlock", "HeadTokens", "SOPE"]

DHVT_NORM = Norm(kind="batchnorm", eps=1e-5)  # the released code's BatchNorm2d


@frozen
class SOPE(Patchify):
    """DHVT's sequential overlapping patch embedding (Eq. 1-3): affine, log2(P) units of 3x3 conv
    stride 2 (no bias) + norm, GELU between units, affine; channels dim / 2^(k-1), ..., dim (so dim >= 2^(k-1)).

    act: released (GELU between units, and after the unit when P = 2, as the released code) | every
    (GELU after every unit, Eq. 2). norm: batchnorm (released) | layernorm (Table 11) | none. The
    affines are learnable per-channel scale and shift (Eq. 1; B.2.2 ablates them)."""

    kind: ClassVar[str] = "sope"
    patch_size: int = field(default=16, validator=check(int, choices=(2, 4, 8, 16)))
    pre_affine: bool = field(default=True, validator=check(bool))
    post_affine: bool = field(default=True, validator=check(bool))
    norm: Norm = field(default=DHVT_NORM, validator=check(Norm))
    act: Literal["released", "every"] = field(default="released", validator=check(str, choices=("released", "every")))

    @property
    def units(self) -> int:
        """k = log2(patch_size), the stride-2 conv units."""
        return self.patch_size.bit_length() - 1

    def map_elements(self, img_size: tuple[int, int], in_chans: int, tokens: Tokens) -> int:
        """The first unit's map at half resolution, twice."""
        return 2 * (tokens.dim // 2 ** (self.units - 1)) * (img_size[0] * img_size[1] // 4)

    def check_input(self, img_size: tuple[int, int], in_chans: int, dim: int) -> None:
        """Patchify's rule, and a first unit of at least one channel (unit i has dim / 2^(units - 1 - i))."""
        Patchify.check_input(self, img_size, in_chans, dim)
        if dim < 2 ** (self.units - 1):
            raise SpecError("patch_size", f"{self.patch_size} needs {self.units} conv units, the first of width dim / "
                                          f"{2 ** (self.units - 1)}: dim {dim} leaves it no channel (dim must be "
                                          f">= {2 ** (self.units - 1)})")


@frozen
class DAFF(FFNKind):
    """DHVT's dynamic aggregation feed-forward (Eq. 4-5, Fig. 2, appendix A.1), on the token grid.

    Patch tokens: 1x1 conv + norm + GELU, then x + GELU(norm(spatial(x))) (the shortcut), then 1x1
    conv + norm. spatial: dwconv (k x k depthwise) | avgpool (k x k, stride 1, Table 8) | none.
    Class token (`cls`): reweight, times W = Linear(GELU(Linear(mean of output patch tokens))), no
    sigmoid (Eq. 4-5) | identity (passed through, Table 8's "Split CLS") | all (W re-weights every
    token, Table 9). `split_cls = false` sends the class token through the same per-token layers as
    the patches (Table 8's plain "ViT" row), which needs spatial = none and cls = identity.
    norm: batchnorm (released) | layernorm (Table 11) | none. Convolutions have bias (released)."""

    kind: ClassVar[str] = "daff"
    needs_grid: ClassVar[bool] = True  # a depth-wise convolution over the image grid
    hidden: int | None = field(default=None, validator=check(int, ge=1, optional=True))
    ratio: float = field(default=4.0, validator=check(float, gt=0))
    kernel: int = field(default=3, validator=check(int, ge=1))
    spatial: Literal["dwconv", "avgpool", "none"] = field(
        default="dwconv", validator=check(str, choices=("dwconv", "avgpool", "none"))
    )
    shortcut: bool = field(default=True, validator=check(bool))
    cls: Literal["reweight", "identity", "all"] = field(
        default="reweight", validator=check(str, choices=("reweight", "identity", "all"))
    )
    split_cls: bool = field(default=True, validator=check(bool))
    norm: Norm = field(default=DHVT_NORM, validator=check(Norm))
    se_reduction: int = field(default=4, validator=check(int, ge=1))

    def __attrs_post_init__(self):
        if self.kernel % 2 == 0:
            raise SpecError("DAFF.kernel", f"must be odd (same padding), got {self.kernel}")
        if not self.split_cls and (self.spatial != "none" or self.cls != "identity"):
            raise SpecError(
                "DAFF.split_cls",
                "false needs spatial = none and cls = identity (the class token has no place on the grid)",
            )

    def hidden_dim(self, dim: int) -> int:
        """`hidden`, else dim x `ratio`."""
        return self.hidden or int(dim * self.ratio)

    def check(self, tokens: Tokens) -> None:
        """Refuse a hidden width, a class-token re-weighting without a class token, or a re-weighting width
        the tokens cannot take."""
        check_hidden(self, tokens.dim)
        if self.cls == "reweight" and not tokens.prefix:
            raise SpecError("cls", "reweight scales the class token, and the model has none: its weights would "
                                   "only ever get zero gradients (use cls = identity, or all)")
        if self.cls != "identity":
            check_size("se_reduction", tokens.dim // self.se_reduction,
                       f"the re-weighting's hidden width dim // se_reduction = {tokens.dim} // {self.se_reduction}")

    def check_before_head(self, head) -> None:
        """In the last block, with a class token: the class-token re-weighting must reach the head. (The
        reverse, cls = identity before a class-token head, leaves that last DAFF unread too; it stays
        expressible, since DHVT's Table 8 "Split CLS" row is that model.)"""
        if self.cls == "reweight" and not head.reads_prefix:
            raise SpecError("cls", f"reweight in the last block scales only the class token, which the {head.kind} "
                                   "head never reads: its weights would only get zero gradients (use cls = identity)")


@frozen
class HeadTokens:
    """DHVT's head tokens (HI-MHSA, Eq. 6-7), what a HeadTokenBlock puts around an attention over all tokens.

    Before attention: split every token (class token included) into h channel groups (h = the
    attention's heads), average each group over the tokens, project each group mean with one shared
    Linear(dim / h, dim), `norm` over dim / h chunks, GELU, add a learnable head embedding; attend
    over [tokens; head tokens]. After attention: add the mean of the head tokens to the class token
    and drop them."""

    norm: Norm = field(default=Norm(eps=1e-5), validator=check(Norm))

    def check(self, tokens: Tokens, attention) -> None:
        """Refuse an attention that cannot take extra tokens, or heads that do not divide dim."""
        if not attention.attends_all:
            raise SpecError("", f"head tokens join the attention as extra tokens; {attention.kind} attention works on "
                                "a fixed token set (windows of the grid, or maps handed between blocks) and cannot "
                                "take them (use mhsa)")
        if tokens.dim % attention.heads:
            raise SpecError("", f"{attention.heads} attention heads do not divide dim {tokens.dim} "
                                "(head tokens split the channels into one group per head)")


@frozen
class HeadTokenBlock(Block):
    """A pre-norm block whose attention runs over the tokens and `head_tokens` (one per attention head; Eq. 6-7):
    the head tokens join an attention over all tokens; after it their mean is added to the class token and they
    are dropped. They average every token, so no key-padding or causal mask applies (not on a text body)."""

    kind: ClassVar[str] = "head_tokens"
    head_tokens: HeadTokens = field(default=HeadTokens(), validator=check(HeadTokens))

    def attended(self, tokens: Tokens) -> Tokens:
        """The stage's tokens and one head token per head (head tokens on another attention are refused)."""
        return attrs.evolve(tokens, joined=self.attention.heads) if self.attention.attends_all else tokens

    def check(self, tokens: Tokens) -> None:
        """A block's checks, then the head tokens' on its attention."""
        Block.check(self, tokens)
        try:
            self.head_tokens.check(tokens, self.attention)
        except SpecError as e:
            raise e.under("head_tokens") from None

    def check_masks(self, padding: bool, causal: bool) -> None:
        """Refuse any mask: the head tokens average every token."""
        if padding or causal:
            raise SpecError("head_tokens", "head tokens average every token, padding and later tokens included: no "
                                           f"{'key-padding' if padding else 'causal'} mask applies to them")
        Block.check_masks(self, padding, causal)

