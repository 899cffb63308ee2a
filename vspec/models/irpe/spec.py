"""iRPE (Wu et al. 2021, "Rethinking and Improving Relative Position Encoding for Vision Transformer"):
multi-head self-attention with contextual image relative position encodings, the product method
(SoT Table 5's iRPE-K-T body is DeiT-T with it on keys)."""

from typing import ClassVar

from attrs import field, frozen

from ...spec.errors import SpecError, check
from ...spec.layout import Tokens
from ...spec.vit import MultiHead

__all__ = ["IRPEAttention"]

PLACES = ("q", "k", "v", "qk", "qv", "kv", "qkv")


@frozen
class IRPEAttention(MultiHead):
    """softmax(q k^T * scale + bias) v per head over all tokens, with iRPE's contextual encodings (Eq. 13-16)
    on the places named by `on` (letters of "qkv"), each its own lookup table:
    k: bias_ij += (q_i * scale) . r^K_{bucket(i, j)} (table (1 or H, head_dim, buckets));
    q: bias_ij += (k_j * scale) . r^Q_{bucket(j, i)} (same shape);
    v: out_i += sum_j attn_ij r^V_{bucket(i, j)} (table (1 or H, buckets, head_dim)).
    `shared_head`: one table for all heads (the released iRPE-K's). Buckets: the product method over the
    token grid (Sec. 3.3), each axis's offset pos_i - pos_j through the piecewise index g (Eq. 18, `alpha`,
    `beta`, `gamma`: the released ratio 1.9 gives 1.9, 3.8, 15.2), (2 int(beta) + 1)^2 buckets, plus one
    shared by every pair involving a token off the grid (class token, head tokens). The buckets come from
    the layout (any grid, square or not), never from the checkpoint. Tables start at zero (released).

    It needs an image grid: a text body refuses it (`needs_grid`). It attends over all tokens, so head tokens
    may join (they take the off-grid bucket). A windowed or hierarchical body keeps its own attention kind
    (WindowMHSA): iRPE is global attention, usable in any stage, whose grid it reads from the stage's layout."""

    kind: ClassVar[str] = "irpe"
    needs_grid: ClassVar[bool] = True
    attends_all: ClassVar[bool] = True

    on: str = field(default="k", validator=check(str, choices=PLACES))
    alpha: float = field(default=1.9, validator=check(float, gt=0))
    beta: float = field(default=3.8, validator=check(float, ge=1))
    gamma: float = field(default=15.2, validator=check(float, gt=0))
    shared_head: bool = field(default=True, validator=check(bool))

    def __attrs_post_init__(self):
        if self.beta < self.alpha:
            raise SpecError("IRPEAttention.beta", f"must be at least alpha {self.alpha} (offsets up to alpha keep "
                                                  f"their value, past int(beta) the table ends), got {self.beta}")
        if not self.alpha < self.gamma:
            raise SpecError("IRPEAttention.gamma", f"must exceed alpha {self.alpha} (Eq. 18 divides by "
                                                   f"ln(gamma / alpha)), got {self.gamma}")

    def buckets(self, tokens: Tokens) -> int:
        """The buckets of each table: (2 int(beta) + 1)^2, one more when a token lies off the grid."""
        return (2 * int(self.beta) + 1) ** 2 + int(tokens.prefix + tokens.joined > 0)

    def working_set(self, tokens: Tokens) -> int:
        """MHSA's, plus each place's lookup (heads x n x buckets) and bias (heads x n x n)."""
        n = tokens.length
        return super().working_set(tokens) + len(self.on) * self.heads * n * (self.buckets(tokens) + n)
