"""DeiT's training augmentations as batched tensor operations, for images decoded on the device (vspec/train/
data/device_decode.py): the same distributions as timm's PIL transforms that the workers run on the CPU path, drawn
for a whole batch at once from one `torch.Generator` (so a batch's draws depend only on its seed, whatever thread draws
them), applied per sample where the sample's draw says so.

    crop_boxes(sizes, g)                 timm's RandomResizedCrop boxes (scale, ratio, 10 tries, centre fallback)
    RandAugment(config, mean, img_size)  'rand-m9-mstd0.5-inc1': its plan (ops, magnitudes) and its ops on tensors
    ColorJitter(strength)                torchvision's, for training without auto_augment (timm's 0.4 default)
    erase_boxes(n, h, w, p, g)           timm's RandomErasing boxes (mode 'const': zeros after normalisation)

Images are float tensors (N, C, H, W) holding 0..255; every op rounds back to whole values as PIL's uint8 ops do.
Parameters are drawn on the CPU (small tensors) and the pixels stay where they are.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..._moved import moved as _moved
from . import pil_ops
from .registry import DataError

__all__ = ["ColorJitter", "LEVEL_DENOM", "RandAugment", "affine", "box_mask", "crop_boxes", "erase_boxes", "rotate",
           "to"]

LEVEL_DENOM = 10.0  # timm's 'Mx' magnitude scale: level = magnitude / 10


def to(t: torch.Tensor, device, dtype=None) -> torch.Tensor:
    """A small CPU tensor (a plan's parameters) onto `device` without waiting for the device: through pinned
    memory, asynchronously on CUDA (a plain copy from pageable memory would synchronise the stream).

    Args:
        t: the CPU tensor.
        device: where it goes.
        dtype: its dtype there, or None (unchanged)."""
    t = t if dtype is None else t.to(dtype)
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def _uniform(g, n, lo, hi, *shape):
    return torch.rand(n, *shape, generator=g, dtype=torch.float64) * (hi - lo) + lo


def _randint(g, hi: torch.Tensor) -> torch.Tensor:
    """Uniform integers in [0, hi] (inclusive, elementwise), as random.randint(0, hi)."""
    return (torch.rand(hi.shape, generator=g, dtype=torch.float64) * (hi + 1)).floor().long().clamp(max=hi)


def crop_boxes(sizes: torch.Tensor, g: torch.Generator, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
               tries: int = 10) -> torch.Tensor:
    """(N, 4) boxes (top, left, height, width) of timm's RandomResizedCropAndInterpolation.get_params for images of
    `sizes` (N, 2: height, width): up to `tries` draws of an area fraction in `scale` and a log-uniform aspect in
    `ratio`, the first that fits; else the whole image cropped to the nearest allowed aspect, centred.

    Args:
        sizes: the images' (height, width), (N, 2).
        g: the generator drawn from.
        scale: the area fraction's range.
        ratio: the aspect's range (width / height).
        tries: draws before the fallback."""
    n = len(sizes)
    h, w = sizes[:, 0:1].double(), sizes[:, 1:2].double()
    area = _uniform(g, n, *scale, tries) * h * w
    aspect = torch.exp(_uniform(g, n, math.log(ratio[0]), math.log(ratio[1]), tries))
    cw, ch = torch.round(torch.sqrt(area * aspect)), torch.round(torch.sqrt(area / aspect))
    fits = (cw <= w) & (ch <= h) & (cw > 0) & (ch > 0)
    first = torch.where(fits.any(1), fits.double().argmax(1), -1)
    pick = first.clamp(min=0)[:, None]
    ch, cw = ch.gather(1, pick)[:, 0].long(), cw.gather(1, pick)[:, 0].long()
    hi, wi = sizes[:, 0].long(), sizes[:, 1].long()
    top, left = _randint(g, (hi - ch).clamp(min=0)), _randint(g, (wi - cw).clamp(min=0))
    # the fallback: the whole image, cut to the nearest allowed aspect, centred
    in_ratio = wi.double() / hi.double()
    fw = torch.where(in_ratio < min(ratio), wi, torch.where(in_ratio > max(ratio), torch.round(hi * max(ratio)).long(),
                                                            wi))
    fh = torch.where(in_ratio < min(ratio), torch.round(wi / min(ratio)).long(), hi)
    miss = first < 0
    ch, cw = torch.where(miss, fh, ch), torch.where(miss, fw, cw)
    top, left = torch.where(miss, (hi - ch) // 2, top), torch.where(miss, (wi - cw) // 2, left)
    return torch.stack([top, left, ch, cw], 1)


def erase_boxes(n: int, h: int, w: int, p: float, g: torch.Generator, area=(0.02, 1 / 3), log_ratio=None,
                tries: int = 10) -> torch.Tensor:
    """(N, 4) boxes (top, left, height, width; height 0: not erased) of timm's RandomErasing (one box, `p` the
    probability): up to `tries` draws of an area fraction and a log-uniform aspect in (0.3, 1 / 0.3) that fit.

    Args:
        n: the images.
        h: their height.
        w: their width.
        p: the probability that an image is erased.
        g: the generator drawn from.
        area: the box's area fraction's range.
        log_ratio: the log aspect's range (None: log 0.3 to log 1 / 0.3).
        tries: draws before giving up (not erased)."""
    log_ratio = log_ratio or (math.log(0.3), math.log(1 / 0.3))
    erase = torch.rand(n, generator=g, dtype=torch.float64) < p
    target = _uniform(g, n, *area, tries) * h * w
    aspect = torch.exp(_uniform(g, n, *log_ratio, tries))
    bh, bw = torch.round(torch.sqrt(target * aspect)).long(), torch.round(torch.sqrt(target / aspect)).long()
    fits = (bw < w) & (bh < h)
    ok = fits.any(1) & erase
    pick = fits.double().argmax(1)[:, None]
    bh, bw = bh.gather(1, pick)[:, 0], bw.gather(1, pick)[:, 0]
    top, left = _randint(g, (h - bh).clamp(min=0)), _randint(g, (w - bw).clamp(min=0))
    zero = torch.zeros_like(bh)
    return torch.stack([top, left, torch.where(ok, bh, zero), torch.where(ok, bw, zero)], 1)


def box_mask(boxes: torch.Tensor, h: int, w: int, device) -> torch.Tensor:
    """(N, 1, H, W) bool: inside each box (top, left, height, width).

    Args:
        boxes: (N, 4) boxes.
        h: the images' height.
        w: their width.
        device: where the mask is made."""
    b = to(boxes, device)
    ys, xs = torch.arange(h, device=device), torch.arange(w, device=device)
    inside_y = (ys >= b[:, 0:1]) & (ys < b[:, 0:1] + b[:, 2:3])
    inside_x = (xs >= b[:, 1:2]) & (xs < b[:, 1:2] + b[:, 3:4])
    return (inside_y[:, :, None] & inside_x[:, None, :])[:, None]


def affine(x, m: torch.Tensor, fill, mode: str = "bicubic"):
    """PIL's Image.transform(AFFINE, (a, b, c, d, e, f)) per sample: output pixel centre q samples the input at
    (a qx + b qy + c, d qx + e qy + f); outside the image, `fill` (timm's image mean).

    Args:
        x: images (N, C, H, W) holding 0..255.
        m: each sample's (a, b, c, d, e, f), (N, 6).
        fill: the value outside the image, per channel.
        mode: the resampling filter ("bicubic" or "bilinear")."""
    n, _, h, w = x.shape
    m = m.to(torch.float64)
    norm = torch.tensor([[2 / w, 0, -1], [0, 2 / h, -1], [0, 0, 1]], dtype=torch.float64)
    full = torch.zeros(n, 3, 3, dtype=torch.float64)
    full[:, :2], full[:, 2, 2] = m.view(n, 2, 3), 1
    theta = to((norm @ full @ torch.linalg.inv(norm))[:, :2], x.device, torch.float32)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    fill = to(torch.tensor(fill), x.device, x.dtype).view(1, -1, 1, 1)
    moved = F.grid_sample(x - fill, grid, mode=mode, padding_mode="zeros", align_corners=False)
    return pil_ops.whole_values(moved + fill)


def _matrices(n, a=1.0, b=0.0, c=0.0, d=0.0, e=1.0, f=0.0):
    cols = [torch.as_tensor(v, dtype=torch.float64).expand(n) for v in (a, b, c, d, e, f)]
    return torch.stack(cols, 1)


def _rotation(degrees: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Image.rotate(degrees)'s matrices: counter-clockwise about the centre."""
    a = -torch.deg2rad(degrees.double())
    cos, sin = torch.cos(a), torch.sin(a)
    cx, cy = w / 2, h / 2
    return _matrices(len(degrees), cos, sin, cx - cos * cx - sin * cy, -sin, cos, cy + sin * cx - cos * cy)


def rotate(x, degrees, fill, mode="bicubic"):
    """Image.rotate(degrees): counter-clockwise about the centre, the same size.

    Args:
        x: images (N, C, H, W) holding 0..255.
        degrees: each sample's angle (N,).
        fill: the value outside the image, per channel.
        mode: the resampling filter ("bicubic" or "bilinear")."""
    return affine(x, _rotation(degrees, *x.shape[2:]), fill, mode)


# ----------------------------------------------------------------------------- RandAugment: its plan and ops
def _negate(g, v):
    return torch.where(torch.rand(v.shape, generator=g, dtype=torch.float64) > 0.5, -v, v)


def _arg(name: str, level: torch.Tensor, g, hp: dict, size: tuple[int, int]) -> torch.Tensor:
    """timm's level_to_arg for op `name` at magnitudes `level` (per sample), signs drawn from `g`."""
    lv = level / LEVEL_DENOM
    if name == "Rotate":
        return _negate(g, lv * 30)
    if name in ("ShearX", "ShearY"):
        return _negate(g, lv * 0.3)
    if name in ("TranslateXRel", "TranslateYRel"):
        return _negate(g, lv * hp.get("translate_pct", 0.45)) * size[1 if name == "TranslateXRel" else 0]
    if name in ("TranslateX", "TranslateY"):
        return _negate(g, lv * float(hp["translate_const"]))
    if name in ("Color", "Contrast", "Brightness", "Sharpness"):
        return lv * 1.8 + 0.1
    if name.endswith("Increasing") and name[:-10] in ("Color", "Contrast", "Brightness", "Sharpness"):
        return (1.0 + _negate(g, lv * 0.9)).clamp(min=0.1)
    if name == "Posterize":
        return torch.floor(lv * 4)
    if name == "PosterizeIncreasing":
        return 4 - torch.floor(lv * 4)
    if name == "PosterizeOriginal":
        return torch.floor(lv * 4) + 4
    if name == "Solarize":
        return torch.floor(lv * 256).clamp(max=256)
    if name == "SolarizeIncreasing":
        return 256 - torch.floor(lv * 256).clamp(max=256)
    if name == "SolarizeAdd":
        return torch.floor(lv * 110).clamp(max=128)
    return torch.zeros_like(level)  # AutoContrast, Equalize, Invert: no argument


# RandAugment's ops by how a layer runs them: tables per channel (from the ramp 0..255, or from the image), blends
# from the degenerate images (pil_ops.DEGENERATE), and one resampling: the matrix entry (a, b, c, d, e, f) a
# geometric op's argument sets (Rotate builds its whole matrix)
_POINTS = {"AutoContrast": pil_ops.autocontrast_lut, "Equalize": pil_ops.equalize_lut, "Invert": pil_ops.invert,
           "Posterize": pil_ops.posterize, "Solarize": pil_ops.solarize, "SolarizeAdd": pil_ops.solarize_add}
_GEOMETRY = {"Rotate": None, "ShearX": 1, "ShearY": 3, "TranslateX": 2, "TranslateY": 5}


def _base(name: str) -> str:
    """timm's op name without its Increasing / Rel / Original form."""
    for suffix in ("Increasing", "Rel", "Original"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


class RandAugment:
    """timm's RandAugment from its config string (timm parses it: the same ops, probability, magnitude and its
    noise, layers and choice weights), planned for a batch by `plan` and applied by `apply`."""

    def __init__(self, config: str, mean, img_size: tuple[int, int], interpolation: str = "bicubic"):
        from timm.data.auto_augment import rand_augment_transform  # extra

        if not config.startswith("rand"):
            raise DataError(f"auto_augment {config!r}: the device pipeline runs RandAugment ('rand-...') only; "
                            f"use --decode-on host for timm's other policies")
        fill = tuple(min(255, round(255 * m)) for m in mean)
        hp = {"translate_const": int(min(img_size) * 0.45), "img_mean": fill}
        ra = rand_augment_transform(config, hp)
        self.names = [op.name for op in ra.ops]
        known = _POINTS.keys() | pil_ops.DEGENERATE.keys() | _GEOMETRY.keys()
        unknown = [n for n in self.names if _base(n) not in known]
        if unknown:
            raise DataError(f"auto_augment {config!r}: the device pipeline has no {', '.join(unknown)}; "
                            f"use --decode-on host")
        self.ops, self.layers, self.weights = ra.ops, ra.num_layers, ra.choice_weights
        self.fill, self.hparams, self.size = fill, hp, img_size
        self.mode = "bicubic" if interpolation == "bicubic" else "bilinear"

    def plan(self, n: int, g: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Per layer: (op index, applied, argument) for each of `n` samples, as timm draws them (ops uniformly
        with replacement, or by the weights without; each applied with its probability; the magnitude noised by
        a normal of its std, or uniform for 'inf', clipped to [0, magnitude_max or 10])."""
        if self.weights is None:
            chosen = torch.randint(len(self.ops), (n, self.layers), generator=g)
        else:
            w = torch.as_tensor(self.weights, dtype=torch.float64).expand(n, -1)
            chosen = torch.multinomial(w, self.layers, replacement=False, generator=g)
        out = []
        for layer in range(self.layers):
            idx = chosen[:, layer]
            prob = torch.tensor([op.prob for op in self.ops], dtype=torch.float64)[idx]
            applied = torch.rand(n, generator=g, dtype=torch.float64) <= prob
            arg = torch.zeros(n, dtype=torch.float64)
            for k, op in enumerate(self.ops):
                rows = (idx == k).nonzero()[:, 0]
                if len(rows):
                    arg[rows] = _arg(op.name, self._magnitude(op, len(rows), g), g, self.hparams, self.size)
            out.append((idx, applied, arg))
        return out

    @staticmethod
    def _magnitude(op, n: int, g) -> torch.Tensor:
        m = torch.full((n,), float(op.magnitude), dtype=torch.float64)
        if op.magnitude_std == float("inf"):
            m = torch.rand(n, generator=g, dtype=torch.float64) * op.magnitude
        elif op.magnitude_std > 0:
            m = m + op.magnitude_std * torch.randn(n, generator=g, dtype=torch.float64)
        return m.clamp(0.0, op.magnitude_max or LEVEL_DENOM)

    def apply(self, x: torch.Tensor, plan) -> torch.Tensor:
        """The planned ops on a batch (N, C, H, W) of whole values 0..255, each sample's op of each layer. A layer
        runs as three passes over the batch, each leaving the samples that drew none of its ops as they are: the
        point ops as one table lookup per channel, the blends as one blend, the geometric ops as one resampling
        (a few dozen kernels a layer, whatever the batch; no host-device synchronisation)."""
        base = [_base(name) for name in self.names]
        for idx, applied, arg in plan:
            names = [base[k] if a else None for k, a in zip(idx.tolist(), applied.tolist())]
            present = set(names) - {None}
            if present & _POINTS.keys():
                x = self._points(x, names, present, arg)
            if present & pil_ops.DEGENERATE.keys():
                x = self._blends(x, names, present, arg)
            if present & _GEOMETRY.keys():
                x = self._geometry(x, names, arg)
        return x

    @staticmethod
    def _where(names, wanted, device):
        return to(torch.tensor([n in wanted for n in names]), device)

    def _points(self, x, names, present, arg):
        n, c = x.shape[:2]
        a = to(arg, x.device, x.dtype)
        ramp = torch.arange(256, dtype=x.dtype, device=x.device).expand(n, c, 1, 256)
        lut = ramp[:, :, 0]
        for name in present & _POINTS.keys():
            fn = _POINTS[name]
            table = fn(x) if fn in (pil_ops.autocontrast_lut, pil_ops.equalize_lut) else fn(ramp, a)[:, :, 0]
            lut = torch.where(self._where(names, {name}, x.device).view(-1, 1, 1), table.to(x.dtype), lut)
        return pil_ops.apply_lut(x, lut)

    def _blends(self, x, names, present, arg):
        degenerate = torch.zeros_like(x)
        for name in present & pil_ops.DEGENERATE.keys():
            degenerate = torch.where(self._where(names, {name}, x.device).view(-1, 1, 1, 1),
                                     pil_ops.DEGENERATE[name](x), degenerate)
        blended = pil_ops.blend(degenerate, x, to(arg, x.device, torch.float32))
        return torch.where(self._where(names, pil_ops.DEGENERATE.keys(), x.device).view(-1, 1, 1, 1), blended, x)

    def _geometry(self, x, names, arg):
        m = _matrices(len(x))
        for name, op in _GEOMETRY.items():
            rows = torch.tensor([k for k, n in enumerate(names) if n == name], dtype=torch.long)
            if not len(rows):
                continue
            if op is None:
                m[rows] = _rotation(arg[rows], *x.shape[2:])
            else:
                m[rows, op] = arg[rows]
        moved = affine(x, m, self.fill, self.mode)
        return torch.where(self._where(names, _GEOMETRY.keys(), x.device).view(-1, 1, 1, 1), moved, x)


class ColorJitter:
    """torchvision's ColorJitter(brightness, contrast, saturation) as timm adds it without auto_augment: factors
    uniform in [1 - s, 1 + s], the three applied in a random order per sample."""

    def __init__(self, strength: float):
        self.s = float(strength)

    def plan(self, n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The draws of `n` samples: each one's order of the three ops (N, 3) and its factors (N, 3), uniform
        in [1 - s, 1 + s].

        Args:
            n: the samples.
            g: the generator drawn from."""
        order = torch.argsort(torch.rand(n, 3, generator=g), 1)
        return order, _uniform(g, n, 1 - self.s, 1 + self.s, 3)

    def apply(self, x: torch.Tensor, plan) -> torch.Tensor:
        """Each position of the order as one blend over the batch: every sample from the degenerate image of
        its op at that position (brightness: black, contrast: the grey mean, saturation: the greyscale)."""
        order, factors = plan
        ops = ("Brightness", "Contrast", "Color")
        for position in range(3):
            k = order[:, position]
            kind = to(k, x.device).view(-1, 1, 1, 1)
            degenerate = torch.zeros_like(x)
            for j, name in enumerate(ops[1:], start=1):
                degenerate = torch.where(kind == j, pil_ops.DEGENERATE[name](x), degenerate)
            x = pil_ops.blend(degenerate, x, to(factors.gather(1, k[:, None])[:, 0], x.device, torch.float32))
        return x


def __getattr__(name: str):  # PIL's point and enhance ops moved to vspec.train.data.pil_ops
    return _moved(__name__, name)
