"""Token embedders: image (B, C, H, W) -> tokens (B, N, dim) on a (H / p, W / p) grid."""

from typing import ClassVar

from attrs import field, frozen

from .core import check
from .norm import Norm


@frozen
class PatchEmbed:
    """ViT's naive linear patch embedding: a p x p convolution with stride p."""

    kind: ClassVar[str] = "patch"
    patch_size: int = field(default=16, validator=check(int, ge=1))
    bias: bool = field(default=True, validator=check(bool))

    def grid(self, img_size: tuple[int, int]) -> tuple[int, int]:
        return (img_size[0] // self.patch_size, img_size[1] // self.patch_size)


@frozen
class SimplePatchEmbed:
    """SimpleViT's (MSF's backbone) embedding: patchify -> norm(patch_dim) -> Linear -> norm(dim)."""

    kind: ClassVar[str] = "simple_patch"
    patch_size: int = field(default=16, validator=check(int, ge=1))
    norm: Norm = field(default=Norm(eps=1e-5), validator=check(Norm))

    def grid(self, img_size: tuple[int, int]) -> tuple[int, int]:
        return (img_size[0] // self.patch_size, img_size[1] // self.patch_size)


Embedder = PatchEmbed | SimplePatchEmbed
