"""SoT's second-order classification head (Xie et al., SoT): pool the word tokens, normalise the
pooled representation, fuse it with the class token (Eq. 1)."""

import math
from typing import ClassVar, Literal

from attrs import field, frozen

from .core import SpecError, check, one_of

# ---------------------------------------------------------------- pools: word tokens -> representation


@frozen
class GAPPool:
    """First-order pooling: the mean token (representation size dim)."""

    kind: ClassVar[str] = "gap_pool"


@frozen
class GCP:
    """Global covariance pooling (Table 3b): Linear(dim -> `dim`), channel-centred covariance,
    matrix square root by `iters` iSQRT (Newton-Schulz) steps, upper triangle flattened."""

    kind: ClassVar[str] = "gcp"
    dim: int = field(default=64, validator=check(int, ge=1))
    iters: int = field(default=5, validator=check(int, ge=1))


@frozen
class MGCrP:
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


Pool = GAPPool | GCP | MGCrP

# ---------------------------------------------------------------- normalisations of the representation


@frozen
class SvPN:
    """Singular-value power normalisation of each head's Q (Eq. 5): sum_i lambda_i^alpha u_i v_i^T.

    method: exact (SVD) | approx (Eq. 6-8: `num_sv` singular values by `iters` power iterations with
    deflation, the rest of the spectrum divided by lambda_r^(1-alpha) + eps). start: the power
    iteration's start vector, learnable (released code, shared by batch and heads) or fixed (ones).
    The released head is approx, 1 singular value, 1 iteration, learnable start, eps 1e-5."""

    kind: ClassVar[str] = "svpn"
    alpha: float = field(default=0.5, validator=check(float, gt=0, le=1))
    method: Literal["approx", "exact"] = field(default="approx", validator=check(str, choices=("approx", "exact")))
    num_sv: int = field(default=1, validator=check(int, ge=1))
    iters: int = field(default=1, validator=check(int, ge=1))
    start: Literal["learnable", "fixed"] = field(
        default="learnable", validator=check(str, choices=("learnable", "fixed"))
    )
    eps: float = field(default=1e-5, validator=check(float, ge=0))


@frozen
class EPN:
    """Element-wise power normalisation: signed square root, then l2 normalisation (Table 4d)."""

    kind: ClassVar[str] = "epn"


@frozen
class LearnableScale:
    """The representation times a learnable scalar 1/tau (Table 4d), 1/tau initialised to `init`."""

    kind: ClassVar[str] = "scale"
    init: float = field(default=1.0, validator=check(float, gt=0))


@frozen
class ReprLayerNorm:
    """LayerNorm over the flattened representation (Table 4d)."""

    kind: ClassVar[str] = "repr_layernorm"
    eps: float = field(default=1e-5, validator=check(float, gt=0))


@frozen
class NoNorm:
    """No normalisation of the representation."""

    kind: ClassVar[str] = "no_norm"


ReprNorm = SvPN | EPN | LearnableScale | ReprLayerNorm | NoNorm

FUSIONS = ("sum", "concat", "aggr_all", "late")


@frozen
class SecondOrderHead:
    """Class token and pooled word tokens together (Eq. 1, Fig. 2).

    fusion: sum, FC(z0) + FC(norm(pool(Z))) | concat, FC([z0, norm(pool(Z))]) | aggr_all,
    FC(norm(pool([z0; Z]))) | late, two classifiers whose logits are added in eval mode and returned
    as a pair in training (the loss is the sum of the two losses). `drop` is dropout on the normalised
    representation (released: 0 / 0.5 / 0.7 for Tiny / Small / Base)."""

    kind: ClassVar[str] = "second_order"
    fusion: Literal["sum", "concat", "aggr_all", "late"] = field(default="sum", validator=check(str, choices=FUSIONS))
    pool: Pool = field(default=MGCrP(), validator=one_of(GAPPool, GCP, MGCrP))
    norm: ReprNorm = field(default=SvPN(), validator=one_of(SvPN, EPN, LearnableScale, ReprLayerNorm, NoNorm))
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))

    def __attrs_post_init__(self):
        if isinstance(self.norm, SvPN):
            if not isinstance(self.pool, MGCrP):
                raise SpecError("SecondOrderHead.norm", "svpn normalises a matrix: it needs the mgcrp pool")
            if self.norm.num_sv > min(self.pool.m, self.pool.n):
                raise SpecError(
                    "SecondOrderHead.norm.num_sv",
                    f"{self.norm.num_sv} exceeds min(m, n) = {min(self.pool.m, self.pool.n)}",
                )

    @property
    def needs_class_token(self) -> bool:
        return self.fusion != "aggr_all"

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
