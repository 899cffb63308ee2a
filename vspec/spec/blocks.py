"""The generic block kinds (the block is a role, `kinds.BlockKind`): the pre-norm block of ViT, DeiT and GPT-2,
and the post-norm block of the original transformer (BERT, OpenAI GPT). A paper's block kind subclasses `Block` in
the paper's own file and keeps its fields."""

from typing import ClassVar

from attrs import field, frozen

from .errors import check
from .kinds import AttentionKind, BlockKind, FFNKind, of_role
from .vit import MHSA, MLP, Norm

__all__ = ["Block", "PostNormBlock"]


@frozen
class Block(BlockKind):
    """A pre-norm transformer block: x + attention(norm(x)), then x + ffn(norm(x)). `layer_scale`, when set, is
    the initial value of a learnable per-channel scale on each branch (CaiT)."""

    kind: ClassVar[str] = "pre_norm"
    attention: AttentionKind = field(default=MHSA(), validator=of_role(AttentionKind))
    ffn: FFNKind = field(default=MLP(), validator=of_role(FFNKind))
    norm: Norm = field(default=Norm(), validator=check(Norm))
    layer_scale: float | None = field(default=None, validator=check(float, gt=0, optional=True))


@frozen
class PostNormBlock(Block):
    """The original transformer's block (BERT, OpenAI GPT): x = norm(x + attention(x)), then
    x = norm(x + ffn(x))."""

    kind: ClassVar[str] = "post_norm"
