"""Channel mixers (feed-forward networks)."""

from typing import ClassVar, Literal

from attrs import field, frozen

from .core import check

ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")


@frozen
class MLP:
    """fc1 -> activation -> fc2. The hidden width is `hidden` if set, else int(dim * ratio)."""

    kind: ClassVar[str] = "mlp"
    hidden: int | None = field(default=None, validator=check(int, ge=1, optional=True))
    ratio: float = field(default=4.0, validator=check(float, gt=0))
    act: Literal["gelu", "gelu_tanh", "relu", "silu"] = field(default="gelu", validator=check(str, choices=ACTIVATIONS))
    bias: bool = field(default=True, validator=check(bool))
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))

    def hidden_dim(self, dim: int) -> int:
        return self.hidden or int(dim * self.ratio)


FFN = MLP
