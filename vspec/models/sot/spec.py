"""SoT (Xie et al., "SoT: delving deeper into classification head for transformer"): the convolutional token
embedding (supplement A) and the second-order classification head: pool the word tokens, normalise the pooled
representation, fuse it with the class token (Eq. 1)."""

import math
from typing import ClassVar, Literal

import attrs
from attrs import field, frozen

from ...spec.errors import SpecError, check, check_eps, check_size
from ...spec.kinds import HeadKind, Kind, of_role
from ...spec.layout import Tokens
from ...spec.vit import LOGITS, Norm, Output, Patchify

__all__ = ["EPN", "GCP", "GAPPool", "LearnableScale", "MGCrP", "NoNorm", "ReprLayerNorm", "SecondOrderHead", "SoTEmbed",
           "SvPN", "language_head"]


@frozen
class SoTEmbed(Patchify):
    """SoT's convolutional token embedding (supplement A): a stem (3x3 conv, 3x3 max-pool stride 2),
    three blocks that each halve the resolution, and a 1x1 conv to the token width; 224 px -> 14 x 14.

    block: dense (released default) | resnet | inception | nonlocal. `downsample_last = false` keeps
    the last block at stride 1: the 7-layer ablation model (112 px -> 14 x 14; the released code picks
    it at 112 px); nonlocal needs a token grid of at least 2 positions (its last non-local block attends
    over them). dense only: `large_output` pools in the first transition alone (224 px -> 56 x 56,
    the released option); `dense_norm` is the norm before each dense layer's ReLUs: BatchNorm (timm
    >= 0.4) or none (timm 0.3.4, which SoT's README pins and its released weights were trained with).
    """

    kind: ClassVar[str] = "sot_conv"
    block: Literal["dense", "resnet", "inception", "nonlocal"] = field(
        default="dense", validator=check(str, choices=("dense", "resnet", "inception", "nonlocal"))
    )
    stem_dim: int = field(default=64, validator=check(int, ge=1))
    downsample_last: bool = field(default=True, validator=check(bool))
    large_output: bool = field(default=False, validator=check(bool))
    dense_norm: Norm = field(default=Norm(kind="batchnorm", eps=1e-5), validator=check(Norm))

    def __attrs_post_init__(self):
        if self.block != "dense" and (self.large_output or self.dense_norm != Norm(kind="batchnorm", eps=1e-5)):
            option = "large_output" if self.large_output else "dense_norm"
            raise SpecError(f"SoTEmbed.{option}", f"applies to the dense embedding only, not {self.block}")
        if self.large_output and not self.downsample_last:
            raise SpecError("SoTEmbed.large_output", "pools in the first transition only: downsample_last = false "
                                                     "would change nothing (leave it true)")

    def check_input(self, img_size: tuple[int, int], in_chans: int, dim: int) -> None:
        """Patchify's rule; nonlocal's last non-local block attends over the token grid (its stride is the
        last), which must hold at least 2 positions: a softmax over one is 1, and theta / phi would only
        ever get zero gradients."""
        Patchify.check_input(self, img_size, in_chans, dim)
        if self.block == "nonlocal" and self.grid(img_size) == (1, 1):
            raise SpecError("block", f"nonlocal on a 1x1 token grid ({img_size[0]}x{img_size[1]} px, patch_size "
                                     f"{self.patch_size}): its last non-local block has 1 position, nothing to "
                                     "attend, and theta / phi would only ever get zero gradients")

    def map_elements(self, img_size: tuple[int, int], in_chans: int, tokens: Tokens) -> int:
        """The stem's map at full resolution; the first block's, up to 352 wide, at half; twice each."""
        pixels = img_size[0] * img_size[1]
        return 2 * self.stem_dim * pixels + 2 * (self.stem_dim + 352) * (pixels // 4)

    @property
    def strides(self) -> tuple[int, int, int]:
        """The three blocks' strides."""
        if self.large_output:
            return (2, 1, 1)
        return (2, 2, 2 if self.downsample_last else 1)

    @property
    def patch_size(self) -> int:
        """The embedding's total stride: the stem's 2 times the blocks'."""
        return 2 * self.strides[0] * self.strides[1] * self.strides[2]


# ---------------------------------------------------------------- the head's two roles of its own (vspec.spec.kinds)
class PoolKind(Kind):
    """The head's pooling: how the word tokens are pooled into one representation."""

    __slots__ = ()
    role: ClassVar[str] = "pool"


class ReprNormKind(Kind):
    """The head's normalisation of the pooled representation."""

    __slots__ = ()
    role: ClassVar[str] = "repr_norm"


# ---------------------------------------------------------------- pools: word tokens -> representation


@frozen
class GAPPool(PoolKind):
    """First-order pooling: the mean token (representation size dim)."""

    kind: ClassVar[str] = "gap_pool"


@frozen
class GCP(PoolKind):
    """Global covariance pooling (Table 3b): Linear(dim -> `dim`), channel-centred covariance,
    matrix square root by `iters` iSQRT (Newton-Schulz) steps, upper triangle flattened."""

    kind: ClassVar[str] = "gcp"
    dim: int = field(default=64, validator=check(int, ge=1))
    iters: int = field(default=5, validator=check(int, ge=1))


@frozen
class MGCrP(PoolKind):
    """Multi-headed global cross-covariance pooling (Eq. 2-3): per head i, X = W_i Z (m rows),
    Y = R_i Z (n rows), Q_i = (1/N) X Y^T. One bias-free Linear(dim, heads * (m + n)) holds every W_i
    and R_i (released code). centering: none | scalar (each projection minus its mean over all its
    entries, released code) | channel (per-channel mean over tokens, a true covariance)."""

    kind: ClassVar[str] = "mgcrp"
    heads: int = field(default=6, validator=check(int, ge=1))
    m: int = field(default=14, validator=check(int, ge=1))
    n: int = field(default=14, validator=check(int, ge=1))
    centering: Literal["none", "scalar", "channel"] = field(
        default="scalar", validator=check(str, choices=("none", "scalar", "channel"))
    )
    bn_relu: bool = field(default=False, validator=check(bool))



# ---------------------------------------------------------------- normalisations of the representation


@frozen
class SvPN(ReprNormKind):
    """Singular-value power normalisation of each head's Q (Eq. 5): sum_i lambda_i^alpha u_i v_i^T.

    method: exact (SVD; num_sv, iters, start, side and eps are approx's and must keep their defaults) | approx
    (Eq. 6-8: `num_sv` singular values by `iters` power iterations with deflation, the rest of the
    spectrum divided by lambda_r^(1-alpha) + eps). start: the power iteration's start vector, learnable
    (released code, shared by batch and heads) or fixed (ones). side: where it starts, right (n entries,
    u = Q v first: the vision code) or left (m entries, v = Q^T u first: SoT's language head, released).
    The released head is approx, 1 singular value, 1 iteration, learnable start, eps 1e-5."""

    kind: ClassVar[str] = "svpn"
    alpha: float = field(default=0.5, validator=check(float, gt=0, lt=1))  # Eq. 5: 0 < alpha < 1; 1 is Q itself
    method: Literal["approx", "exact"] = field(default="approx", validator=check(str, choices=("approx", "exact")))
    num_sv: int = field(default=1, validator=check(int, ge=1))
    iters: int = field(default=1, validator=check(int, ge=1))
    start: Literal["learnable", "fixed"] = field(
        default="learnable", validator=check(str, choices=("learnable", "fixed"))
    )
    eps: float = field(default=1e-5, validator=check(float, ge=0))
    side: Literal["right", "left"] = field(default="right", validator=check(str, choices=("right", "left")))

    def __attrs_post_init__(self):
        if self.method == "exact":  # the SVD takes none of the power iteration's options: refuse them, unused
            for f in attrs.fields(SvPN):
                if f.name in ("num_sv", "iters", "start", "eps", "side") and getattr(self, f.name) != f.default:
                    raise SpecError(f"SvPN.{f.name}", "applies to method = approx only; the exact SVD does not use it")


@frozen
class EPN(ReprNormKind):
    """Element-wise power normalisation: signed square root, then l2 normalisation (Table 4d)."""

    kind: ClassVar[str] = "epn"


@frozen
class LearnableScale(ReprNormKind):
    """The representation times a learnable scalar 1/tau (Table 4d), 1/tau initialised to `init`."""

    kind: ClassVar[str] = "scale"
    init: float = field(default=1.0, validator=check(float, gt=0))


@frozen
class ReprLayerNorm(ReprNormKind):
    """LayerNorm over the flattened representation (Table 4d)."""

    kind: ClassVar[str] = "repr_layernorm"
    eps: float = field(default=1e-5, validator=check_eps)


@frozen
class NoNorm(ReprNormKind):
    """No normalisation of the representation."""

    kind: ClassVar[str] = "no_norm"



FUSIONS = ("sum", "concat", "aggr_all", "late")
PADDINGS = ("masked", "included")


@frozen
class SecondOrderHead(HeadKind):
    """Class token and pooled word tokens together (Eq. 1, Fig. 2).

    fusion: sum, FC(z0) + FC(norm(pool(Z))) | concat, FC([z0, norm(pool(Z))]) | aggr_all,
    FC(norm(pool([z0; Z]))) | late, two classifiers whose logits are added in eval mode and trained as
    two outputs (`outputs()`: cls and word, weight 1 each; the loss is the sum of the two losses).
    `drop` is dropout on the normalised representation (released: 0 / 0.5 / 0.7 for Tiny / Small / Base).

    z0: None, the class token (SoT; on a text body its first token, [CLS]) | mean_token, the mean of the
    word tokens in the class token's place, for bodies without a class token (Swin; the released code has
    no such option: Eq. 1 with z0 = mean_i z_i) | last_token, a text body's last real token, the word
    tokens the others (GPT, SoT Sec. 4.3); aggr_all has no z0 term.

    padding (text bodies): masked, the word tokens are the real ones (means, covariance and BatchNorm
    statistics over them alone: the logits do not depend on how much padding a batch carries) | included,
    every position after the first, padding too (N = L - 1): SoT's released BERT head, which saw every
    sequence padded to 128 tokens."""

    kind: ClassVar[str] = "second_order"
    any_grid: ClassVar[bool] = True
    fusion: Literal["sum", "concat", "aggr_all", "late"] = field(default="sum", validator=check(str, choices=FUSIONS))
    pool: PoolKind = field(default=MGCrP(), validator=of_role(PoolKind))
    norm: ReprNormKind = field(default=SvPN(), validator=of_role(ReprNormKind))
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))
    z0: Literal["mean_token", "last_token"] | None = field(
        default=None, validator=check(str, choices=("mean_token", "last_token"), optional=True))
    padding: Literal["masked", "included"] = field(default="masked", validator=check(str, choices=PADDINGS))
    masks: ClassVar[bool] = True

    def __attrs_post_init__(self):
        if self.padding == "included" and (self.z0 is not None or self.fusion == "aggr_all"):
            raise SpecError("SecondOrderHead.padding", "included is the released BERT head's: the first token "
                                                       "as z0 (z0 unset), the positions after it pooled")
        if self.fusion == "aggr_all" and self.z0 is not None:
            raise SpecError("SecondOrderHead.z0", "aggr_all pools every token and has no z0 term; leave z0 unset")
        if isinstance(self.norm, SvPN):
            if not isinstance(self.pool, MGCrP):
                raise SpecError("SecondOrderHead.norm", "svpn normalises a matrix: it needs the mgcrp pool")
            if self.norm.num_sv > min(self.pool.m, self.pool.n):
                raise SpecError(
                    "SecondOrderHead.norm.num_sv",
                    f"{self.norm.num_sv} exceeds min(m, n) = {min(self.pool.m, self.pool.n)}",
                )

    @property
    def reads_prefix(self) -> bool:
        """Whether the head reads the class token (as z0, or pooled with the word tokens)."""
        return self.fusion == "aggr_all" or self.z0 is None

    def check(self, tokens: Tokens) -> None:
        """Refuse a z0 or fusion the tokens cannot give, a second-order pool of fewer than 2 word tokens, sizes
        beyond the limits and a norm whose output would be constant."""
        if self.z0 == "last_token" and not tokens.sequence:
            raise SpecError("z0", "last_token is a text body's last real token; an image body has a class token "
                                  "(z0 unset) or none (mean_token)")
        if self.fusion != "aggr_all" and self.z0 is None and not tokens.prefix and not tokens.sequence:
            raise SpecError("", f"the second_order head with {self.fusion} fusion needs class_token = true "
                                "(or z0 = mean_token: the mean word token in its place)")
        # a text body's z0 (first or last token) is one of its tokens; aggr_all pools the class token too
        words = tokens.patches - (tokens.sequence and self.fusion != "aggr_all" and self.z0 != "mean_token")
        if words < 2 and not isinstance(self.pool, GAPPool):
            raise SpecError("pool", f"a (cross-)covariance of {words} word token{'s' * (words != 1)} is degenerate "
                                    "(zero when centred, rank one otherwise); second-order pools need at least 2 "
                                    "word tokens")
        if isinstance(self.pool, MGCrP):
            check_size("pool", self.pool.heads * (self.pool.m + self.pool.n), "the projection width heads x (m + n)")
        size = self.repr_dim(tokens.dim)
        check_size("pool", size, "the representation size")
        least = {EPN: 2, ReprLayerNorm: 3}.get(type(self.norm), 1)
        if size < least:  # EPN of one value is its sign; a LayerNorm of one value is 0, of two their order
            raise SpecError("norm", f"{self.norm.kind} of a representation of {size} value{'s' * (size > 1)} is "
                                    f"constant: it needs at least {least} (enlarge the pool)")

    def outputs(self) -> tuple[Output, ...]:
        """What the head returns in training and the loss each output takes."""
        return (Output("cls"), Output("word")) if self.fusion == "late" else LOGITS

    def repr_shape(self, dim: int) -> tuple[int, ...]:
        """Shape of the pooled representation (per sample) for token width `dim`."""
        if isinstance(self.pool, MGCrP):
            return (self.pool.heads, self.pool.m, self.pool.n)
        if isinstance(self.pool, GCP):
            return (self.pool.dim * (self.pool.dim + 1) // 2,)
        return (dim,)

    def repr_dim(self, dim: int) -> int:
        """Size of the flattened representation."""
        return math.prod(self.repr_shape(dim))

    def working_set(self, tokens: Tokens, classes: int) -> int:
        """The pool's projections of every token (4 copies), the representation (4) and GCP's covariance (8)."""
        pool = self.pool
        width = pool.heads * (pool.m + pool.n) if isinstance(pool, MGCrP) else pool.dim if isinstance(pool, GCP) else 0
        square = pool.dim**2 if isinstance(pool, GCP) else 0
        return tokens.dim + classes + 4 * tokens.length * width + 4 * self.repr_dim(tokens.dim) + 8 * square


def language_head(q: int, k: int, drop: float = 0.0, z0: Literal["last_token"] | None = None,
                  padding: Literal["masked", "included"] = "masked") -> SecondOrderHead:
    """SoT's language head (its released BERT code; docs/families/text.md): one MGCrP head whose q- and
    k-projections are each followed by BatchNorm + ReLU, channel-centred (1/N) X Y^T, svPN by one power iteration
    started on the left (alpha 0.5, eps 1e-5), dropout, the sum with the first-token classifier. z0 = last_token
    for GPT (SoT Sec. 4.3); padding = included is the released head's pooling (every position after [CLS]).

    Args:
        q: the q-projection's width m.
        k: the k-projection's width n.
        drop: the dropout before the classifier.
        z0: "last_token" (GPT) or None (the first token).
        padding: "masked" or "included" (above).
    """
    return SecondOrderHead(fusion="sum", pool=MGCrP(heads=1, m=q, n=k, centering="channel", bn_relu=True),
                           norm=SvPN(side="left"), drop=drop, z0=z0, padding=padding)
