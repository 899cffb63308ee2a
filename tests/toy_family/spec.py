"""The toy family's kinds: a GLU feed-forward (an FFN kind), the gated block (a block kind), and a carried state of
its own, "trace" (the class token a traced block writes, which the trace head reads): a third kind of state beside
Refiner's attention maps and Conformer's CNN map, declared by these kinds alone."""

from typing import ClassVar

from attrs import field, frozen

from vspec.spec import Block, SpecError, StateShape
from vspec.spec.errors import check, check_size
from vspec.spec.kinds import FFNKind, HeadKind

__all__ = ["GatedBlock", "GLUFFN", "TracedBlock", "TraceHead"]

TRACE = "trace"


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


@frozen
class TracedBlock(GatedBlock):
    """A gated block that also writes its output's class token as the state "trace" (B, dim)."""

    kind: ClassVar[str] = "traced"

    @property
    def writes(self) -> tuple[str, ...]:
        return (*self.attention.writes, TRACE)

    def state_out(self, state, tokens) -> dict:
        return {**GatedBlock.state_out(self, state, tokens), TRACE: StateShape((tokens.dim,), f"trace x {tokens.dim}")}

    def check(self, tokens) -> None:
        if not tokens.prefix:
            raise SpecError("", "a traced block writes its class token: the model needs class_token = true")
        GatedBlock.check(self, tokens)


@frozen
class TraceHead(HeadKind):
    """fc(class token + the trace the last traced block wrote)."""

    kind: ClassVar[str] = "trace_head"
    reads: ClassVar[tuple[str, ...]] = (TRACE,)
