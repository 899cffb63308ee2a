"""The convolutional patch stem that Refined-ViT and LV-ViT share (core: two families use it, and a family never
imports another)."""

from typing import ClassVar

from attrs import field, frozen

from .errors import SpecError, check, check_size
from .vit import Patchify

__all__ = ["ConvStem"]


@frozen
class ConvStem(Patchify):
    """A CNN patch stem: conv 7x7 stride 2 (`width` channels) -> conv 3x3 (`growth` x width) -> conv 3x3
    (`growth`^2 x width), each without bias and followed by BatchNorm and ReLU, then a projection conv with
    kernel = stride = patch_size / 2 (bias) to dim: a stride of patch_size in all.

    Refined-ViT's (T2T-style "more convs for patch embedding", Refiner Table 11): width 32, growth 2 (32 / 64 / 128
    channels, the defaults). LV-ViT's (TokenLabeling `PatchEmbed4_2`, `PatchEmbed4_2_128`): width 64 or 128,
    growth 1."""

    kind: ClassVar[str] = "conv_stem"
    patch_size: int = field(default=16, validator=check(int, ge=2))
    width: int = field(default=32, validator=check(int, ge=1))
    growth: int = field(default=2, validator=check(int, ge=1, le=64))

    @property
    def widths(self) -> tuple[int, int, int]:
        """The three convolutions' output channels."""
        return self.width, self.growth * self.width, self.growth**2 * self.width

    def check_input(self, img_size: tuple[int, int], in_chans: int, dim: int) -> None:
        """SpecError where the stem cannot take the image: an odd patch size, a width too large."""
        if self.patch_size % 2:
            raise SpecError("patch_size", f"must be even (the stem strides 2, then patch_size / 2), got "
                                          f"{self.patch_size}")
        Patchify.check_input(self, img_size, in_chans, dim)
        check_size("width", self.widths[-1], f"the stem's last width {self.growth}^2 x width")
