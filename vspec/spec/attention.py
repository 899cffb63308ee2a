"""Token mixers."""

from typing import ClassVar

from attrs import field, frozen

from .core import check


@frozen
class MHSA:
    """Multi-head self-attention: softmax(q k^T * scale) v over `heads` heads of `head_dim` channels.

    `head_dim` defaults to dim / heads; `scale` defaults to head_dim ** -0.5.
    """

    kind: ClassVar[str] = "mhsa"
    heads: int = field(default=12, validator=check(int, ge=1))
    head_dim: int | None = field(default=None, validator=check(int, ge=1, optional=True))
    qkv_bias: bool = field(default=True, validator=check(bool))
    proj_bias: bool = field(default=True, validator=check(bool))
    scale: float | None = field(default=None, validator=check(float, gt=0, optional=True))
    attn_drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))
    proj_drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))

    def inner_dim(self, dim: int) -> int:
        return self.heads * (self.head_dim or dim // self.heads)


Attention = MHSA


@frozen
class HeadTokens:
    """DHVT's head tokens (HI-MHSA, Eq. 6-7), a Block option that works with any attention kind.

    Before attention: split every token (class token included) into h channel groups (h = the
    attention's heads), average each group over the tokens, project each group mean with one shared
    Linear(dim / h, dim), LayerNorm over dim / h chunks, GELU, add a learnable head embedding; attend
    over [tokens; head tokens]. After attention: add the mean of the head tokens to the class token
    and drop them."""

    eps: float = field(default=1e-5, validator=check(float, gt=0))
