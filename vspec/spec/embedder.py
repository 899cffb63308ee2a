"""Token embedders: image (B, C, H, W) -> tokens (B, N, dim) on a (H / p, W / p) grid."""

from typing import ClassVar, Literal

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


@frozen
class SoTEmbed:
    """SoT's convolutional token embedding (supplement A): a stem (3x3 conv, 3x3 max-pool stride 2),
    three blocks that each halve the resolution, and a 1x1 conv to the token width; 224 px -> 14 x 14.

    block: dense (released default) | resnet | inception | nonlocal. `downsample_last = false` keeps
    the last block at stride 1: the 7-layer ablation model (112 px -> 14 x 14).
    """

    kind: ClassVar[str] = "sot_conv"
    block: Literal["dense", "resnet", "inception", "nonlocal"] = field(
        default="dense", validator=check(str, choices=("dense", "resnet", "inception", "nonlocal"))
    )
    stem_dim: int = field(default=64, validator=check(int, ge=1))
    downsample_last: bool = field(default=True, validator=check(bool))

    @property
    def patch_size(self) -> int:
        """The embedding's total stride: stem 2 x three blocks 2 (x 1 for the last without downsampling)."""
        return 16 if self.downsample_last else 8

    def grid(self, img_size: tuple[int, int]) -> tuple[int, int]:
        return (img_size[0] // self.patch_size, img_size[1] // self.patch_size)


@frozen
class SOPE:
    """DHVT's sequential overlapping patch embedding (Eq. 1-3): affine, log2(P) units of 3x3 conv
    stride 2 (no bias) + norm, GELU between units, affine; channels dim / 2^(k-1), ..., dim.

    act: released (GELU between units, and after the unit when P = 2, as the released code) | every
    (GELU after every unit, Eq. 2). norm: batchnorm (released) | layernorm (Table 11). The affines are
    learnable per-channel scale and shift (Eq. 1; B.2.2 ablates them)."""

    kind: ClassVar[str] = "sope"
    patch_size: int = field(default=16, validator=check(int, choices=(2, 4, 8, 16)))
    pre_affine: bool = field(default=True, validator=check(bool))
    post_affine: bool = field(default=True, validator=check(bool))
    norm: Literal["batchnorm", "layernorm"] = field(
        default="batchnorm", validator=check(str, choices=("batchnorm", "layernorm"))
    )
    act: Literal["released", "every"] = field(default="released", validator=check(str, choices=("released", "every")))

    @property
    def units(self) -> int:
        return self.patch_size.bit_length() - 1

    def grid(self, img_size: tuple[int, int]) -> tuple[int, int]:
        return (img_size[0] // self.patch_size, img_size[1] // self.patch_size)


Embedder = PatchEmbed | SimplePatchEmbed | SoTEmbed | SOPE
