"""Classification heads: tokens (B, N, dim) -> logits (B, num_classes)."""

from typing import ClassVar

from attrs import field, frozen

from .core import check
from .norm import Norm


@frozen
class ClassTokenHead:
    """Classify from the class token (ViT / DeiT)."""

    kind: ClassVar[str] = "class_token"
    needs_class_token: ClassVar[bool] = True
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))


@frozen
class GAPHead:
    """Classify from the mean of the patch tokens (class / prefix tokens excluded), optionally
    normalised (SimpleViT: mean -> LayerNorm -> Linear)."""

    kind: ClassVar[str] = "gap"
    needs_class_token: ClassVar[bool] = False
    norm: Norm | None = field(default=None, validator=check(Norm, optional=True))
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))

