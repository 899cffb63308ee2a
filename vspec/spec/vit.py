"""The generic parts (ViT, DeiT, SimpleViT): norm, patch embeddings, multi-head self-attention, MLP,
class-token and average-pooling heads.

Every component class may have `check(tokens)`: the rules that concern it given the shape it will
see (`Tokens`: width, grid, prefix tokens), raising SpecError with a path relative to itself.
"""

from typing import ClassVar, Literal

from attrs import field, frozen

from .core import MAX_SIZE, SpecError, check, check_size
from .layout import Tokens

NORM_KINDS = ("layernorm", "batchnorm", "none")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")


@frozen
class Norm:
    """A normalisation over the channel axis: layernorm (per token) | batchnorm (per channel, over the
    batch and all positions) | none (the identity). Used by every component that normalises."""

    kind: Literal["layernorm", "batchnorm", "none"] = field(default="layernorm",
                                                           validator=check(str, choices=NORM_KINDS))
    eps: float = field(default=1e-6, validator=check(float, gt=0))


class Patchify:
    """What the patch embedders share: a `patch_size` stride that must divide the image."""

    __slots__ = ()

    def grid(self, img_size: tuple[int, int]) -> tuple[int, int]:
        return (img_size[0] // self.patch_size, img_size[1] // self.patch_size)

    def check_input(self, img_size: tuple[int, int], in_chans: int, dim: int) -> None:
        """The rules that tie the embedder to the image it reads and the width `dim` it writes."""
        for axis, size in zip(("height", "width"), img_size):
            if size % self.patch_size:
                raise SpecError("patch_size", f"{self.patch_size} does not divide the image {axis} {size}")


@frozen
class PatchEmbed(Patchify):
    """ViT's linear patch embedding: a p x p convolution with stride p, then `norm` (Swin) if set."""

    kind: ClassVar[str] = "patch"
    patch_size: int = field(default=16, validator=check(int, ge=1))
    bias: bool = field(default=True, validator=check(bool))
    norm: Norm | None = field(default=None, validator=check(Norm, optional=True))


@frozen
class SimplePatchEmbed(Patchify):
    """SimpleViT's (MSF's backbone) embedding: patchify -> norm(patch_dim) -> Linear -> norm(dim)."""

    kind: ClassVar[str] = "simple_patch"
    patch_size: int = field(default=16, validator=check(int, ge=1))
    norm: Norm = field(default=Norm(eps=1e-5), validator=check(Norm))

    def check_input(self, img_size: tuple[int, int], in_chans: int, dim: int) -> None:
        Patchify.check_input(self, img_size, in_chans, dim)
        check_size("patch_size", in_chans * self.patch_size**2, f"a patch's {in_chans} x {self.patch_size}^2 values")


def check_heads(heads: int, head_dim: int | None, dim: int) -> None:
    if head_dim is None and dim % heads:
        raise SpecError("heads", f"{heads} does not divide dim {dim} "
                                 "(set attention.head_dim to use an inner width other than dim)")


@frozen
class MultiHead:
    """What the attention kinds share: `heads` heads of `head_dim` channels (default dim / heads), q, k, v
    from one Linear (`qkv_bias`), the output projection (`proj_bias`), `scale` (default head_dim ** -0.5),
    dropout on the attention and on the output."""

    heads: int = field(default=12, validator=check(int, ge=1))
    head_dim: int | None = field(default=None, validator=check(int, ge=1, optional=True))
    qkv_bias: bool = field(default=True, validator=check(bool))
    proj_bias: bool = field(default=True, validator=check(bool))
    scale: float | None = field(default=None, validator=check(float, gt=0, optional=True))
    attn_drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))
    proj_drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))

    def inner_dim(self, dim: int) -> int:
        return self.heads * (self.head_dim or dim // self.heads)

    def check(self, tokens: Tokens) -> None:
        check_heads(self.heads, self.head_dim, tokens.dim)
        check_size("head_dim" if self.head_dim else "heads", self.inner_dim(tokens.dim),
                   f"the inner width heads x head_dim = {self.heads} x {self.head_dim or tokens.dim // self.heads}")


@frozen
class MHSA(MultiHead):
    """Multi-head self-attention over all tokens: softmax(q k^T * scale) v per head."""

    kind: ClassVar[str] = "mhsa"
    attends_all: ClassVar[bool] = True  # any token set: extra tokens (head tokens) may join


def check_hidden(ffn, dim: int) -> None:
    """An FFN's hidden width, `hidden` or int(dim x ratio), is a real layer's (no float overflow in int())."""
    if ffn.hidden is None:
        wide = dim * ffn.ratio
        check_size("ratio", int(wide) if wide <= MAX_SIZE else wide, f"the hidden width int({ffn.ratio} x dim {dim})")


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

    def check(self, tokens: Tokens) -> None:
        check_hidden(self, tokens.dim)


@frozen
class ClassTokenHead:
    """Classify from the class token (ViT / DeiT)."""

    kind: ClassVar[str] = "class_token"
    reads_prefix: ClassVar[bool] = True  # whether the head reads the class token
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))

    def check(self, tokens: Tokens) -> None:
        if not tokens.prefix:
            raise SpecError("", "the class_token head needs class_token = true")


@frozen
class GAPHead:
    """Classify from the mean of the patch tokens (class / prefix tokens excluded), optionally
    normalised (SimpleViT: mean -> LayerNorm -> Linear; Swin: mean -> Linear)."""

    kind: ClassVar[str] = "gap"
    reads_prefix: ClassVar[bool] = False
    norm: Norm | None = field(default=None, validator=check(Norm, optional=True))
    drop: float = field(default=0.0, validator=check(float, ge=0, lt=1))

    def check(self, tokens: Tokens) -> None:
        """Any tokens will do: there is always at least one patch token."""
