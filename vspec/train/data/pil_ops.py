"""PIL's image operations as batched tensor operations (vspec/train/data/device_augment.py's RandAugment and
ColorJitter run them on images decoded on the device): the ImageEnhance blends (`color`, `contrast`,
`brightness`, `sharpness`: `blend` from the `DEGENERATE` image), and the ImageOps point ops, as tables per channel
where they read the image (`autocontrast_lut`, `equalize_lut`, looked up by `apply_lut`). Images are float tensors
(N, C, H, W) holding 0..255; each sample has its own argument (N,), and every op gives whole values as PIL's uint8
ops do (`whole_values`). The tests compare each with PIL's own (tests/train/data/test_device_augment.py)."""

import torch
import torch.nn.functional as F

__all__ = ["DEGENERATE", "apply_lut", "autocontrast", "autocontrast_lut", "blend", "brightness", "color", "contrast",
           "equalize", "equalize_lut", "invert", "posterize", "sharpness", "solarize", "solarize_add", "whole_values"]


def whole_values(x: torch.Tensor) -> torch.Tensor:
    """Back to whole values in 0..255 (PIL's uint8), rounded in place.

    Args:
        x: the float tensor rounded and clamped (returned).
    """
    return x.round_().clamp_(0, 255)


def _gray(x: torch.Tensor) -> torch.Tensor:
    """PIL's convert('L'): (R * 299 + G * 587 + B * 114) / 1000, rounded; one channel stays as it is."""
    if x.shape[1] == 1:
        return x
    return torch.floor((x[:, 0:1] * 19595 + x[:, 1:2] * 38470 + x[:, 2:3] * 7471 + 0x8000) / 65536)


def blend(degenerate: torch.Tensor, x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """PIL's ImageEnhance (Image.blend): degenerate + factor * (x - degenerate) per sample, in float32 and
    truncated to whole values as PIL's C code does (rounding would sit half a level above PIL on average).

    Args:
        degenerate: the images blended from (N, C, H, W).
        x: the images (N, C, H, W) holding 0..255.
        factor: each sample's factor (N,): 0 gives `degenerate`, 1 `x`.
    """
    f = factor.to(x.device, torch.float32).view(-1, 1, 1, 1)
    return (degenerate.float() + f * (x.float() - degenerate.float())).floor_().clamp_(0, 255).to(x.dtype)


def _smooth(x):
    """PIL's SMOOTH filter (3 x 3, centre 5, others 1, / 13), rounded; the border keeps its pixels."""
    k = torch.ones(3, 3, device=x.device, dtype=x.dtype)
    k[1, 1] = 5
    c = x.shape[1]
    smooth = whole_values(F.conv2d(x, (k / 13).expand(c, 1, 3, 3), padding=1, groups=c))
    border = torch.ones_like(x[:1, :1], dtype=torch.bool)
    border[..., 1:-1, 1:-1] = False
    return torch.where(border, x, smooth)


# the image each ImageEnhance op blends from (PIL's): greyscale, its rounded mean, black, smoothed
DEGENERATE = {"Color": lambda x: _gray(x).expand_as(x),
              "Contrast": lambda x: torch.floor(_gray(x).mean((1, 2, 3), keepdim=True) + 0.5).expand_as(x),
              "Brightness": torch.zeros_like, "Sharpness": _smooth}


def color(x, f):
    """PIL's ImageEnhance.Color of images `x` by each sample's factor `f` (N,): blended with its greyscale.

    Args:
        x: images (N, C, H, W) holding 0..255.
        f: each sample's enhance factor (N,) (1: the image unchanged).
    """
    return blend(DEGENERATE["Color"](x), x, f)


def contrast(x, f):
    """PIL's ImageEnhance.Contrast of images `x` by each sample's factor `f` (N,): blended with its greyscale's
    rounded mean.

    Args:
        x: images (N, C, H, W) holding 0..255.
        f: each sample's enhance factor (N,) (1: the image unchanged).
    """
    return blend(DEGENERATE["Contrast"](x), x, f)


def brightness(x, f):
    """PIL's ImageEnhance.Brightness of images `x` by each sample's factor `f` (N,): blended with black.

    Args:
        x: images (N, C, H, W) holding 0..255.
        f: each sample's enhance factor (N,) (1: the image unchanged).
    """
    return blend(DEGENERATE["Brightness"](x), x, f)


def sharpness(x, f):
    """PIL's ImageEnhance.Sharpness of images `x` by each sample's factor `f` (N,): blended with its smoothed
    self.

    Args:
        x: images (N, C, H, W) holding 0..255.
        f: each sample's enhance factor (N,) (1: the image unchanged).
    """
    return blend(DEGENERATE["Sharpness"](x), x, f)


def apply_lut(x: torch.Tensor, lut: torch.Tensor) -> torch.Tensor:
    """Each channel's values of images `x` looked up in its table of `lut` (N, C, 256).

    Args:
        x: images (N, C, H, W) holding 0..255.
        lut: each sample's table per channel (N, C, 256).
    """
    n, c = x.shape[:2]
    return lut.to(x.dtype).gather(2, x.reshape(n, c, -1).long()).view_as(x)


def autocontrast_lut(x):
    """ImageOps.autocontrast (no cutoff) of images `x` as a table per channel: stretched to 0..255 (truncated),
    flat channels kept; rounded as PIL's int(ix * scale + offset) in float64 (int((ix - lo) * scale) truncates some
    values one higher).

    Args:
        x: images (N, C, H, W) holding 0..255.
    """
    lo, hi = x.amin((2, 3)).double()[..., None], x.amax((2, 3)).double()[..., None]
    ramp = torch.arange(256, dtype=torch.float64, device=x.device).expand(*x.shape[:2], 256)
    scale = torch.full_like(hi, 255.0) / (hi - lo).clamp(min=1)  # a true division (255.0 / t is 255 * (1 / t))
    return torch.where(hi > lo, torch.floor((ramp * scale - lo * scale).clamp(0, 255)), ramp)


def autocontrast(x, _=None):
    """PIL's ImageOps.autocontrast of images `x` per sample and channel (`autocontrast_lut`; `_`: no argument).

    Args:
        x: images (N, C, H, W) holding 0..255.
        _: unused (the ops' common signature: an op with no argument).
    """
    return apply_lut(x, autocontrast_lut(x))


def equalize_lut(x):
    """ImageOps.equalize of images `x` as a table per channel: lut[i] = (step // 2 + pixels below i) // step,
    step = (pixels - the count of the last value present) // 255; a channel with one value (or step 0) is kept.

    Args:
        x: images (N, C, H, W) holding 0..255.
    """
    n, c = x.shape[:2]
    v = x.reshape(n * c, -1).long()
    hist = torch.zeros(n * c, 256, dtype=torch.long, device=x.device).scatter_add_(1, v, torch.ones_like(v))
    last = hist.gather(1, v.amax(1, keepdim=True))
    step = (v.shape[1] - last) // 255
    below = hist.cumsum(1) - hist
    lut = ((step // 2 + below) // step.clamp(min=1)).clamp(max=255)
    keep = ((hist > 0).sum(1, keepdim=True) <= 1) | (step == 0)
    return torch.where(keep, torch.arange(256, device=x.device), lut).view(n, c, 256)


def equalize(x, _=None):
    """PIL's ImageOps.equalize of images `x` per sample and channel (`equalize_lut`; `_`: no argument).

    Args:
        x: images (N, C, H, W) holding 0..255.
        _: unused (the ops' common signature: an op with no argument).
    """
    return apply_lut(x, equalize_lut(x))


def invert(x, _=None):
    """PIL's ImageOps.invert of images `x`: 255 - x (`_`: no argument).

    Args:
        x: images (N, C, H, W) holding 0..255.
        _: unused (the ops' common signature: an op with no argument).
    """
    return 255 - x


def posterize(x, bits):
    """Images `x` with the top `bits` bits of each sample (N,) kept (0: black).

    Args:
        x: images (N, C, H, W) holding 0..255.
        bits: each sample's bits kept (N,), 0..8.
    """
    mask = (255 << (8 - bits.long().clamp(0, 8))) & 255
    return (x.long() & mask.view(-1, 1, 1, 1).to(x.device)).to(x.dtype)


def solarize(x, thresh):
    """PIL's ImageOps.solarize of images `x`: the values at or above each sample's threshold `thresh` (N,)
    inverted.

    Args:
        x: images (N, C, H, W) holding 0..255.
        thresh: each sample's threshold (N,).
    """
    t = thresh.view(-1, 1, 1, 1).to(x)
    return torch.where(x >= t, 255 - x, x)


def solarize_add(x, add, thresh: float = 128):
    """timm's solarize_add of images `x`: each sample's `add` (N,) added (clamped at 255) to the values below
    `thresh` (timm's 128).

    Args:
        x: images (N, C, H, W) holding 0..255.
        add: each sample's value added (N,).
        thresh: the values below it are changed (timm's 128).
    """
    return torch.where(x < thresh, (x + add.view(-1, 1, 1, 1).to(x)).clamp(max=255), x)
