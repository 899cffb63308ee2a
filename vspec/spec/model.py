"""The model: an embedder, a stack of blocks and a head, with the shape that ties them together."""

from typing import Literal

from attrs import field, frozen

from .attention import MHSA, Attention, HeadTokens
from .core import SpecError, check, check_pair, join, one_of, pair
from .embedder import SOPE, Embedder, PatchEmbed, SimplePatchEmbed, SoTEmbed
from .ffn import DAFF, FFN, MLP
from .head import ClassTokenHead, GAPHead
from .second_order import EPN, GCP, MGCrP, GAPPool, LearnableScale, NoNorm, ReprLayerNorm, SecondOrderHead, SvPN
from .norm import Norm

POS_EMBEDS = ("none", "learned", "sincos1d", "sincos2d")
INITS = ("timm", "torch")

# The component kinds each role accepts; the union annotations below name the same classes.
ROLES: dict[str, tuple[type, ...]] = {
    "embedder": (PatchEmbed, SimplePatchEmbed, SoTEmbed, SOPE),
    "attention": (MHSA,),
    "ffn": (MLP, DAFF),
    "head": (ClassTokenHead, GAPHead, SecondOrderHead),
    "pool": (GAPPool, GCP, MGCrP),  # inside SecondOrderHead
    "repr_norm": (SvPN, EPN, LearnableScale, ReprLayerNorm, NoNorm),  # inside SecondOrderHead
}
KINDS: dict[str, type] = {c.kind: c for classes in ROLES.values() for c in classes}


def _fusion(head) -> str:
    return f" with {head.fusion} fusion" if hasattr(head, "fusion") else ""


@frozen
class Block:
    """A pre-norm transformer block: x + attention(norm(x)), then x + ffn(norm(x)).

    `layer_scale`, when set, is the initial value of a learnable per-channel scale on each branch.
    `head_tokens`, when set, adds DHVT's head tokens around the attention (any attention kind).
    """

    attention: Attention = field(default=MHSA(), validator=one_of(*ROLES["attention"]))
    ffn: FFN = field(default=MLP(), validator=one_of(*ROLES["ffn"]))
    norm: Norm = field(default=Norm(), validator=check(Norm))
    layer_scale: float | None = field(default=None, validator=check(float, gt=0, optional=True))
    head_tokens: HeadTokens | None = field(default=None, validator=check(HeadTokens, optional=True))


def _check_blocks(inst, attribute, value):
    if isinstance(value, Block):
        return
    if not isinstance(value, tuple) or not value:
        raise SpecError("Model.block", f"must be a Block or a non-empty list of Blocks, got {value!r}")
    for i, b in enumerate(value):
        if not isinstance(b, Block):
            raise SpecError(f"Model.block.{i}", f"must be a Block, got {type(b).__name__}")


@frozen
class Model:
    """A vision transformer.

    `block` is one Block repeated `depth` times, or a list of `depth` Blocks (heterogeneous stack).
    `pos_embed`: none | learned (covers class token and patches, timm) | sincos1d (fixed, over all
    tokens) | sincos2d (fixed, over the patch grid only; SimpleViT). `final_norm` applies the last
    block's norm kind after the stack. `drop_path` is the stochastic-depth rate of the last block,
    ramped linearly from 0 over depth. `init`: timm (ViT initialisation) | torch (PyTorch defaults).
    """

    embedder: Embedder = field(default=PatchEmbed(), validator=one_of(*ROLES["embedder"]))
    block: Block | tuple[Block, ...] = field(
        default=Block(), converter=lambda v: tuple(v) if isinstance(v, list) else v, validator=_check_blocks
    )
    depth: int = field(default=12, validator=check(int, ge=1))
    dim: int = field(default=768, validator=check(int, ge=1))
    num_classes: int = field(default=1000, validator=check(int, ge=0))
    img_size: tuple[int, int] = field(default=(224, 224), converter=pair, validator=check_pair)
    in_chans: int = field(default=3, validator=check(int, ge=1))
    class_token: bool = field(default=True, validator=check(bool))
    pos_embed: Literal["none", "learned", "sincos1d", "sincos2d"] = field(
        default="learned", validator=check(str, choices=POS_EMBEDS)
    )
    final_norm: bool = field(default=True, validator=check(bool))
    head: ClassTokenHead | GAPHead | SecondOrderHead = field(default=ClassTokenHead(), validator=one_of(*ROLES["head"]))
    drop_path: float = field(default=0.0, validator=check(float, ge=0, lt=1))
    init: Literal["timm", "torch"] = field(default="timm", validator=check(str, choices=INITS))

    def __attrs_post_init__(self):
        """Rules that tie fields together; paths run from the model root."""
        if isinstance(self.block, tuple) and len(self.block) != self.depth:
            raise SpecError("depth", f"must equal the number of listed blocks ({len(self.block)}), got {self.depth}")
        p = self.embedder.patch_size
        for axis, size in zip(("height", "width"), self.img_size):
            if size % p:
                raise SpecError("embedder.patch_size", f"{p} does not divide the image {axis} {size}")
        for path, block in self.named_blocks():
            if block.ffn.hidden_dim(self.dim) < 1:
                raise SpecError(join(path, "ffn.ratio"), f"{block.ffn.ratio} x dim {self.dim} leaves no hidden unit")
            heads = block.attention.heads
            if (block.attention.head_dim is None or block.head_tokens is not None) and self.dim % heads:
                raise SpecError(
                    join(path, "attention.heads"),
                    f"{heads} does not divide dim {self.dim} "
                    "(set attention.head_dim to use an inner width other than dim)",
                )
        if self.head.needs_class_token and not self.class_token:
            raise SpecError("head", f"the {self.head.kind} head{_fusion(self.head)} needs class_token = true")
        if self.pos_embed == "sincos2d" and self.dim % 4:
            raise SpecError("pos_embed", f"sincos2d needs dim divisible by 4, got {self.dim}")
        if self.pos_embed == "sincos1d" and self.dim % 2:
            raise SpecError("pos_embed", f"sincos1d needs an even dim, got {self.dim}")

    @property
    def blocks(self) -> tuple[Block, ...]:
        return self.block if isinstance(self.block, tuple) else (self.block,) * self.depth

    def named_blocks(self) -> list[tuple[str, Block]]:
        """(path, block) once per distinct spec entry: `block` or `block.i`."""
        if isinstance(self.block, Block):
            return [("block", self.block)]
        return [(f"block.{i}", b) for i, b in enumerate(self.block)]

    @property
    def grid(self) -> tuple[int, int]:
        return self.embedder.grid(self.img_size)

    @property
    def num_prefix_tokens(self) -> int:
        return int(self.class_token)
