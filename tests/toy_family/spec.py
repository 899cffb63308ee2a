"""The toy family's kinds: a GLU feed-forward (an FFN kind) and the gated block (a block kind)."""

from typing import ClassVar

from attrs import field, frozen

from vspec.spec import Block, SpecError
from vspec.spec.core import check, check_size
from vspec.spec.kinds import FFNKind

__all__ = ["GatedBlock", "GLUFFN"]


@frozen
class GLUFFN(FFNKind):
    """(x W) * silu(x V), then W2: `hidden` units (default 8/3 x dim, rounded down to a multiple of 8)."""

    kind: ClassVar[str] = "glu_ffn"
    any_grid: ClassVar[bool] = True
    hidden: int | None = field(default=None, validator=check(int, ge=1, optional=True))

    def hidden_dim(self, dim: int) -> int:
        return self.hidden or max(8, 8 * dim // 3 // 8 * 8)

    def check(self, tokens) -> None:
        check_size("hidden", self.hidden_dim(tokens.dim), "the hidden width")

    def working_set(self, tokens) -> int:
        return 3 * tokens.length * self.hidden_dim(tokens.dim)


@frozen
class GatedBlock(Block):
    """x + g1 attention(norm(x)), then x + g2 ffn(norm(x)); g1, g2 learnable scalars starting at `gate_init`."""

    kind: ClassVar[str] = "gated"
    gate_init: float = field(default=0.0, validator=check(float))

    def check(self, tokens) -> None:
        if self.layer_scale is not None:
            raise SpecError("layer_scale", "a gated block scales its branches by its gates already")
        Block.check(self, tokens)
