"""T2T-ViT (Yuan et al., "Tokens-to-Token ViT"): the tokens-to-token module as an embedder. The body it feeds is
the ordinary one (class token, fixed sinusoid table = `pos_embed="sincos1d"`, pre-norm blocks); the presets are
`specs/t2t_vit_*.py`."""

from typing import ClassVar, Literal

from attrs import field, frozen

from ...spec.errors import SpecError, check, check_size
from ...spec.kinds import EmbedderKind
from ...spec.layout import Tokens

__all__ = ["T2TEmbed"]

# (kernel, stride, padding) of the three soft splits (Sec. 3.1, Eq. 3): 7/4/2, then 3/2/1 twice -> 16 px per token
SOFT_SPLITS = ((7, 4, 2), (3, 2, 1), (3, 2, 1))
TOKEN_BLOCKS = ("performer", "transformer")


@frozen
class T2TEmbed(EmbedderKind):
    """The T2T module (Sec. 3.1): soft split (an unfold of overlapping 7 x 7 patches, stride 4), then twice
    [a token block over the tokens (Eq. 1: T' = MLP(MSA(T))) -> restructurize them to their grid (Eq. 2) -> soft
    split 3 x 3, stride 2], then a Linear to the width: one token per 16 x 16 pixels, each a mix of its
    neighbourhood. The image sides must be multiples of 16 (any aspect; the released code takes squares only).

    `block`: the token blocks' form. performer (released default): one-head linear attention with m = token_dim x
    `kernel_ratio` positive random features exp(w x - |x|^2 / 2) / sqrt(m) (Performer's FAVOR+); w is drawn at
    construction (orthogonal rows of norm sqrt(m)) and kept as a buffer that loads from a checkpoint, never
    trained. transformer (the `_t_` models): one-head softmax attention, scale = (input width)^-0.5, no qkv bias.
    Both project to `token_dim`, take the residual through v (the input is wider than the output: T' = v +
    proj(attn)), then T' + MLP(LN(T')) with an MLP token_dim -> token_dim -> token_dim. `drop`: the performer's
    dropouts after proj and the MLP (released: 0.1, hard-coded); the transformer block has none, as released."""

    kind: ClassVar[str] = "t2t"
    patch_size: ClassVar[int] = 16
    token_dim: int = field(default=64, validator=check(int, ge=1))
    block: Literal["performer", "transformer"] = field(default="performer", validator=check(str, choices=TOKEN_BLOCKS))
    kernel_ratio: float = field(default=0.5, validator=check(float, gt=0))
    drop: float = field(default=0.1, validator=check(float, ge=0, lt=1))

    def __attrs_post_init__(self):
        if self.block == "transformer" and (self.kernel_ratio != 0.5 or self.drop != 0.1):
            name = "kernel_ratio" if self.kernel_ratio != 0.5 else "drop"
            raise SpecError(f"T2TEmbed.{name}", "sets the performer token block; the transformer one has neither "
                                                "random features nor dropout (leave it at its default)")

    @property
    def features(self) -> int:
        """m, the performer's random features."""
        return int(self.token_dim * self.kernel_ratio)

    def widths(self, in_chans: int) -> tuple[int, int, int]:
        """The width of each soft split's tokens: C x 7^2, then token_dim x 3^2 twice."""
        return in_chans * 49, self.token_dim * 9, self.token_dim * 9

    def check_input(self, img_size: tuple[int, int], in_chans: int, dim: int) -> None:
        """Refuse an image size the soft splits do not divide, or widths beyond the size limits."""
        for axis, size in zip(("height", "width"), img_size):
            if size % 16:
                raise SpecError("", f"the soft splits reduce the image 16-fold: its {axis} {size} is not a multiple "
                                    "of 16")
        check_size("token_dim", self.widths(in_chans)[1], f"the soft split's width {self.token_dim} x 9")
        check_size("", self.widths(in_chans)[0], f"the first soft split's width {in_chans} x 49")
        if self.block == "performer":
            check_size("kernel_ratio", self.features, f"the random features int(token_dim x kernel_ratio) = "
                                                      f"int({self.token_dim} x {self.kernel_ratio})")

    def map_elements(self, img_size: tuple[int, int], in_chans: int, tokens: Tokens) -> int:
        """The first soft split's tokens (H/4 x W/4 of C x 49), the token block on them (its q k v, and the n x n
        map of the transformer form), twice."""
        n = (img_size[0] // 4) * (img_size[1] // 4)
        inner = 3 * self.token_dim + (n if self.block == "transformer" else self.features)
        return 2 * n * (in_chans * 49 + inner)
