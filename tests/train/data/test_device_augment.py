"""vspec.train.data.device_augment against the CPU path's reference, timm's (and torchvision's) PIL transforms: the same
distributions of random resized crop boxes, erasing boxes, RandAugment's op choices, apply rates and magnitudes,
colour jitter's factors and order; the same pixels from each op on the same image and argument.

Distributions are compared by two-sample Kolmogorov-Smirnov tests at alpha 1e-4 and frequencies within 5 sigma
(tests/helpers/stats.py), with every generator seeded: each verdict is the same every run."""

import random

import numpy as np
import pytest
import torch
from PIL import Image
from timm.data import IMAGENET_DEFAULT_MEAN
from timm.data import auto_augment as timm_aa
from timm.data.random_erasing import RandomErasing
from timm.data.transforms import RandomResizedCropAndInterpolation
from torchvision import transforms
from torchvision.transforms import functional as TF

from tests.helpers.stats import assert_rate, assert_same_law, assert_same_rate
from vspec.train.data import device_augment, pil_ops
from vspec.train.data.transforms import _posterize

CONFIG = "rand-m9-mstd0.5-inc1"  # DeiT's
SIZE = (48, 64)  # (height, width): not square, so that a height used for a width shows
FILL = tuple(min(255, round(255 * m)) for m in IMAGENET_DEFAULT_MEAN)  # timm's img_mean hparam


def _seed(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed)
    return torch.Generator().manual_seed(seed)


def _tensor(images: list[np.ndarray]) -> torch.Tensor:
    """uint8 (H, W, C) arrays -> float (N, C, H, W) of whole values."""
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float()


def _array(x: torch.Tensor) -> np.ndarray:
    return x.permute(1, 2, 0).numpy().astype(np.int64)


def _smooth(h: int = SIZE[0], w: int = SIZE[1]) -> np.ndarray:
    """A smooth RGB image without symmetry (bicubic filters of either kind agree closely on it)."""
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([128 + 100 * np.sin(xx / 7 + yy / 11), 128 + 90 * np.cos(yy / 5 - xx / 13),
                    40 + 1.5 * xx + 0.9 * yy], -1)
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def _images(n: int = 24, seed: int = 0) -> list[np.ndarray]:
    """Varied images for the point and enhance ops: uniform noise, noise in a narrow range per channel (so that
    autocontrast and equalize have work), few values, a flat channel, and the smooth image."""
    rng = np.random.default_rng(seed)
    out = [_smooth()]
    for _ in range(n):
        lo = rng.integers(0, 200, 3)
        hi = lo + rng.integers(1, 256 - lo)
        out.append(rng.integers(lo, hi + 1, (*SIZE, 3)).astype(np.uint8))
    few = rng.choice([3, 70, 71, 200], (*SIZE, 3)).astype(np.uint8)
    flat = rng.integers(0, 256, (*SIZE, 3)).astype(np.uint8)
    flat[..., 1] = 90
    return [*out, few, flat]


# ------------------------------------------------------------------------------------ random resized crop
def _fallback(h: int, w: int, ratio=(3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    """timm's centre fallback box (top, left, height, width)."""
    r = w / h
    fh, fw = (round(w / min(ratio)), w) if r < min(ratio) else (h, round(h * max(ratio))) if r > max(ratio) else (h, w)
    return (h - fh) // 2, (w - fw) // 2, fh, fw


@pytest.mark.parametrize("hw", [(300, 400), (400, 300), (100, 320), (60, 900), (900, 60)])
def test_crop_boxes_match_timm(hw):
    """Boxes of crop_boxes and of timm's RandomResizedCropAndInterpolation.get_params (default scale and ratio) for
    one image size: top, left, height, width, area fraction and log aspect the same laws; the centre fallback taken
    as often (about 5 % for 100 x 320, about 99 % for 60 x 900 and 900 x 60: extreme aspects rarely fit). A broken
    sampler fails: height and width swapped (the 400 x 300 / 300 x 400 pair), area drawn in the wrong range or the
    aspect uniform instead of log-uniform (KS), fewer or more than 10 tries or no fallback (the rates), an offset
    drawn from a wrong range (KS on top / left)."""
    h, w = hw
    scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
    g = _seed(1)
    img = Image.new("L", (w, h))
    ref = np.array([RandomResizedCropAndInterpolation.get_params(img, scale, ratio) for _ in range(20000)])
    ours = device_augment.crop_boxes(torch.tensor([[h, w]] * 100000), g, scale=scale, ratio=ratio).numpy()
    assert ours.shape == (100000, 4)
    top, left, bh, bw = ours.T
    assert (bh >= 1).all() and (bw >= 1).all() and (top >= 0).all() and (left >= 0).all()
    assert (top + bh <= h).all() and (left + bw <= w).all()
    for k, name in enumerate(("top", "left", "height", "width")):
        assert_same_law(ours[:, k], ref[:, k], f"{hw} crop {name}")
    assert_same_law(ours[:, 2] * ours[:, 3] / (h * w), ref[:, 2] * ref[:, 3] / (h * w), f"{hw} crop area")
    assert_same_law(np.log(ours[:, 3] / ours[:, 2]), np.log(ref[:, 3] / ref[:, 2]), f"{hw} crop aspect")
    fb = np.array(_fallback(h, w, ratio))
    assert_same_rate((ours == fb).all(1).sum(), len(ours), (ref == fb).all(1).sum(), len(ref), f"{hw} fallback")


# ------------------------------------------------------------------------------------------ random erasing
def _erased(x: torch.Tensor) -> np.ndarray:
    """(N, 4) boxes where a batch of ones became 0 (height 0: untouched); each must be one full rectangle."""
    out = np.zeros((len(x), 4), dtype=np.int64)
    zero = (x == 0).all(1).numpy()
    assert ((x == 0).any(1).numpy() == zero).all()  # every channel erased alike
    for i, m in enumerate(zero):
        rows, cols = np.flatnonzero(m.any(1)), np.flatnonzero(m.any(0))
        if len(rows):
            out[i] = rows[0], cols[0], len(rows), len(cols)
            assert m.sum() == len(rows) * len(cols)
    return out


@pytest.mark.parametrize("p", [0.25, 1.0])
def test_erase_boxes_match_timm(p):
    """erase_boxes against timm's RandomErasing(probability=p, mode='const') on a batch of ones (N, C, H, W): timm
    erases each sample of a 4-D batch on its own (one draw of `p` each, up to 10 tries of an area in [0.02, 1/3] and
    a log-uniform aspect in [0.3, 1/0.3], the box strictly smaller than the image), so the zeros give its boxes. The
    erase rate is p (and timm's), height, width, top and left the same laws. A broken sampler fails: height and
    width swapped (H != W here), `<=` for timm's `<` (boxes as large as the image), a wrong area range (KS), one
    draw of `p` for the whole batch (p=0.25: the rate would be 0 or 1)."""
    h, w = 24, 40
    g = _seed(2)
    ref = _erased(RandomErasing(probability=p, mode="const", device="cpu")(torch.ones(5000, 3, h, w)))
    ours = device_augment.erase_boxes(50000, h, w, p, g).numpy()
    assert ours.shape == (50000, 4)
    hit, ref_hit = ours[:, 2] > 0, ref[:, 2] > 0
    assert ((ours[:, 3] > 0) == hit).all()  # height 0 exactly where width 0
    assert_rate(ref_hit.sum(), len(ref), p, f"timm's erase rate at p={p}")  # the reference is read right
    assert_rate(hit.sum(), len(ours), p, f"erase rate at p={p}")
    ours, ref = ours[hit], ref[ref_hit]
    assert (ours[:, 2] < h).all() and (ours[:, 3] < w).all()
    assert (ours[:, 0] + ours[:, 2] <= h).all() and (ours[:, 1] + ours[:, 3] <= w).all()
    for k, name in enumerate(("top", "left", "height", "width")):
        assert_same_law(ours[:, k], ref[:, k], f"p={p} erase {name}")
    # the mask that the pipeline erases with covers exactly the boxes
    boxes = device_augment.erase_boxes(64, h, w, p, _seed(3))
    mask = device_augment.box_mask(boxes, h, w, torch.device("cpu"))
    assert mask.shape == (64, 1, h, w)
    assert (mask.flatten(1).sum(1) == boxes[:, 2] * boxes[:, 3]).all()


# ------------------------------------------------------------------------------------------- RandAugment
def _timm_randaugment():
    """timm's RandAugment as the CPU path builds it (create_transform's hparams for SIZE, bicubic)."""
    hp = {"translate_const": int(min(SIZE) * 0.45), "img_mean": FILL, "interpolation": Image.BICUBIC}
    return timm_aa.rand_augment_transform(CONFIG, hp)


class _Layer:
    """One of timm's ops, recording each time RandAugment picks it (a layer) and, through its aug_fn, the level
    arguments when it is applied."""

    def __init__(self, k: int, op, log: list):
        self.k, self.op, self.log = k, op, log
        op.aug_fn = self.record

    def record(self, img, *args, **_):
        self.log[-1][1] = args
        return img

    def __call__(self, img):
        self.log.append([self.k, None])
        return self.op(img)


def _timm_plan(n: int, seed: int):
    """timm's draws for n images: (op index (n, layers), applied (n, layers), argument (n, layers)) with the
    argument as RandAugment.plan gives it (TranslateXRel / YRel in pixels)."""
    ra = _timm_randaugment()
    log: list = []
    ra.ops = [_Layer(k, op, log) for k, op in enumerate(ra.ops)]
    names = [layer.op.name for layer in ra.ops]
    _seed(seed)
    img = Image.new("RGB", (SIZE[1], SIZE[0]))
    for _ in range(n):
        ra(img)
    assert len(log) == n * ra.num_layers
    idx = np.array([k for k, _ in log]).reshape(n, -1)
    applied = np.array([a is not None for _, a in log]).reshape(n, -1)
    scale = {"TranslateXRel": SIZE[1], "TranslateYRel": SIZE[0]}
    arg = np.array([(a[0] if a else 0.0) * scale.get(names[k], 1) if a is not None else np.nan
                    for k, a in log]).reshape(n, -1)
    return names, idx, applied, arg


@pytest.fixture(scope="module")
def plans():
    """timm's recorded draws (20000 images) and RandAugment.plan's (200000 samples)."""
    names, idx, applied, arg = _timm_plan(20000, seed=4)
    ra = device_augment.RandAugment(CONFIG, IMAGENET_DEFAULT_MEAN, SIZE, "bicubic")
    plan = ra.plan(200000, torch.Generator().manual_seed(5))
    ours = tuple(np.stack([t.numpy() for t in layer], 1) for layer in zip(*plan))  # (n, layers) each
    return {"names": names, "ra": ra, "ref": (idx, applied, arg), "ours": ours}


def test_randaugment_op_choices_and_apply_rates(plans):
    """The same ops in the same order as timm's (15 for 'inc1'), 2 layers; each layer picks each op uniformly
    (1/15, as timm's np.random.choice with replacement) and independently (the same op twice at rate 1/15), and
    applies it at rate 0.5 (timm's `random.random() > prob` skips). A broken plan fails: an op never or twice as
    often chosen (an off-by-one in the draw), the layers drawn without replacement (same-op rate 0), the apply
    test inverted or applied always (rate 0.5)."""
    ra, names = plans["ra"], plans["names"]
    assert ra.names == names and len(names) == 15 and ra.layers == 2
    ref_idx, ref_applied, _ = plans["ref"]
    idx, applied, _ = plans["ours"]
    n, ref_n = len(idx), len(ref_idx)
    for layer in range(2):
        for k, name in enumerate(names):
            chose, ref_chose = idx[:, layer] == k, ref_idx[:, layer] == k
            assert_rate(chose.sum(), n, 1 / 15, f"layer {layer} picks {name}")
            assert_same_rate(chose.sum(), n, ref_chose.sum(), ref_n, f"layer {layer} picks {name} (timm)")
            assert_same_rate(applied[chose, layer].sum(), chose.sum(), ref_applied[ref_chose, layer].sum(),
                             ref_chose.sum(), f"layer {layer} applies {name} (timm)")
        assert_rate(applied[:, layer].sum(), n, 0.5, f"layer {layer} applied")
    assert_rate((idx[:, 0] == idx[:, 1]).sum(), n, 1 / 15, "the same op in both layers")
    assert_same_rate((idx[:, 0] == idx[:, 1]).sum(), n, (ref_idx[:, 0] == ref_idx[:, 1]).sum(), ref_n,
                     "the same op in both layers (timm)")


def test_randaugment_arguments_match_timm(plans):
    """Each op's argument where applied, pooled over both layers, has timm's law (level_to_arg of a magnitude
    N(9, 0.5) clipped to [0, 10], signs negated at rate 1/2): rotation degrees, shear factors, translations in
    pixels (pct x width for X, pct x height for Y), enhance factors, posterize bits, solarize thresholds, solarize
    add. A broken plan fails: no magnitude noise or a uniform one, a missing random sign (all positive), degrees
    in radians, translate X scaled by the height, posterize 4 - bits for bits, thresholds of the non-increasing
    form."""
    names = plans["names"]
    ref_idx, ref_applied, ref_arg = (v.ravel() for v in plans["ref"])
    idx, applied, arg = (v.ravel() for v in plans["ours"])
    assert np.isfinite(arg).all()
    for k, name in enumerate(names):
        if name in ("AutoContrast", "Equalize", "Invert"):  # no argument
            continue
        ours, ref = arg[(idx == k) & applied], ref_arg[(ref_idx == k) & ref_applied]
        assert_same_law(ours, ref, f"{name}'s argument")
        if name in GEOMETRIC:
            assert_rate((ours < 0).sum(), len(ours), 0.5, f"{name}'s sign")


def _apply_one(ra, name: str, x: torch.Tensor, value: float) -> torch.Tensor:
    """RandAugment.apply with one layer: op `name` applied to every sample at argument `value`."""
    k = ra.names.index(name)
    n = len(x)
    plan = [(torch.full((n,), k), torch.ones(n, dtype=torch.bool), torch.full((n,), value, dtype=torch.float64))]
    return ra.apply(x.clone(), plan)


def _timm_op(name: str, img: Image.Image, value: float) -> np.ndarray:
    """timm's op `name` (its NAME_TO_OP function, with the CPU path's posterize) at level argument `value` as
    RandAugment.plan states it (translations in pixels), with create_transform's fill and bicubic filter."""
    if name == "TranslateXRel":
        value = value / img.size[0]
    if name == "TranslateYRel":
        value = value / img.size[1]
    fn = _posterize if "Posterize" in name else timm_aa.NAME_TO_OP[name]
    args = () if name in ("AutoContrast", "Equalize", "Invert") else (value,)
    return np.asarray(fn(img, *args, fillcolor=FILL, resample=Image.BICUBIC)).astype(np.int64)


GEOMETRIC = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
GEOMETRY_BOUND = 2.5  # mean |diff| in levels on the smooth image: measured 0.7..1.1; the mirrored op > 45

# each of the 15 ops at arguments inside its range ('Increasing' enhance factors 0.1..1.9, bits 0..4, ...)
APPLY_CASES = [
    ("AutoContrast", 0), ("Equalize", 0), ("Invert", 0), ("PosterizeIncreasing", 0), ("PosterizeIncreasing", 1),
    ("PosterizeIncreasing", 3), ("SolarizeIncreasing", 26), ("SolarizeIncreasing", 128), ("SolarizeAdd", 99),
    ("ColorIncreasing", 0.19), ("ColorIncreasing", 1.81), ("ContrastIncreasing", 0.3), ("ContrastIncreasing", 1.7),
    ("BrightnessIncreasing", 0.4), ("BrightnessIncreasing", 1.9), ("SharpnessIncreasing", 0.1),
    ("SharpnessIncreasing", 1.85), ("Rotate", 27.0), ("Rotate", -19.5), ("ShearX", 0.27), ("ShearX", -0.3),
    ("ShearY", 0.25), ("ShearY", -0.29), ("TranslateXRel", 13.7), ("TranslateXRel", -25.0),
    ("TranslateYRel", 9.4), ("TranslateYRel", -19.0),
]


@pytest.mark.parametrize("name,value", APPLY_CASES)
def test_randaugment_apply_matches_timm_ops(plans, name, value):
    """RandAugment.apply runs each op as timm's does with the same argument (as plan gives it) on the same image:
    point ops exactly, enhance ops within one level (PIL rounds its blend in 8 bits), geometric ops (PIL's
    bicubic a=-0.5 against grid_sample's a=-0.75, fill timm's image mean) within GEOMETRY_BOUND in mean on the smooth
    image, and no closer with the sign of the argument flipped (so a mirrored rotation, shear or translation, or
    a translation by the other side's size, fails)."""
    ra = plans["ra"]
    images = [_smooth()] if name in GEOMETRIC else _images(6)
    x = _tensor(images)
    out = _apply_one(ra, name, x, value)
    for img, got in zip(images, out):
        ref, got = _timm_op(name, Image.fromarray(img), value), _array(got)
        diff = np.abs(ref - got)
        if name.startswith(("Color", "Contrast", "Brightness", "Sharpness")):
            assert diff.max() <= 1, f"{name}({value}): {diff.max()} levels off"
        elif name in GEOMETRIC:
            assert diff.mean() < GEOMETRY_BOUND, f"{name}({value}): mean |diff| {diff.mean():.2f}"
            flipped = np.abs(ref - _array(_apply_one(ra, name, x, -value)[0])).mean()
            assert flipped > 4 * GEOMETRY_BOUND, f"{name}({value}): the mirrored op is as close ({flipped:.2f})"
        else:
            assert diff.max() == 0, f"{name}({value}): {(diff > 0).sum()} pixels differ, by up to {diff.max()}"


POINT_OPS = [("autocontrast", timm_aa.auto_contrast, [None]), ("equalize", timm_aa.equalize, [None]),
             ("invert", timm_aa.invert, [None]), ("posterize", _posterize, [0, 1, 2, 3, 4, 7, 8]),
             ("solarize", timm_aa.solarize, [0, 1, 100, 128, 255, 256]),
             ("solarize_add", timm_aa.solarize_add, [0, 1, 30, 110])]


@pytest.mark.parametrize("name,reference,values", POINT_OPS, ids=[c[0] for c in POINT_OPS])
def test_point_ops_match_pil_exactly(name, reference, values):
    """The point ops on a batch of varied images (narrow ranges per channel, few values, a flat channel) give
    PIL's pixels exactly, each image on its own (per-image, per-channel statistics for autocontrast and
    equalize). A broken op fails: autocontrast rounding (x - lo) * scale (one level high where PIL's
    x * scale + offset falls just below a whole number), equalize with another step or a batch-wide histogram,
    solarize at > for >=, posterize keeping the low bits."""
    images = _images(30)
    x = _tensor(images)
    fn = getattr(pil_ops, name)
    for v in values:
        out = fn(x.clone(), torch.full((len(x),), float(v or 0)))
        for i, img in enumerate(images):
            pil = Image.fromarray(img)
            ref = np.asarray(reference(pil) if v is None else reference(pil, v)).astype(np.int64)
            diff = np.abs(ref - _array(out[i]))
            assert diff.max() == 0, f"{name}({v}) image {i}: {(diff > 0).sum()} pixels differ, up to {diff.max()}"


@pytest.mark.parametrize("name", ["color", "contrast", "brightness", "sharpness"])
def test_enhance_ops_within_one_level(name):
    """PIL's ImageEnhance (timm's ops, and torchvision's adjust_* on PIL images) at factors over 0.1..1.9 (and
    0, 1): within one level everywhere and without bias (mean difference under 0.05 levels; PIL blends in float32
    and truncates). A broken op fails: rounding where PIL truncates (half a level high on average), a wrong grey
    (not ITU-R 601 weights), a contrast mean of the colour image, sharpness' border smoothed."""
    images = _images(8)
    x = _tensor(images)
    fn = getattr(pil_ops, name)
    reference = getattr(timm_aa, name)
    for f in (0.0, 0.1, 0.55, 1.0, 1.37, 1.9):
        out = fn(x.clone(), torch.full((len(x),), f))
        for i, img in enumerate(images):
            diff = _array(out[i]) - np.asarray(reference(Image.fromarray(img), f)).astype(np.int64)
            assert np.abs(diff).max() <= 1, f"{name}({f}) image {i}: up to {np.abs(diff).max()} levels off"
            assert abs(diff.mean()) < 0.05, f"{name}({f}) image {i}: {diff.mean():+.2f} levels off on average"


def test_affine_and_rotate_follow_pil():
    """rotate (counter-clockwise degrees, about the centre) and affine with PIL's coefficients (output pixel q
    samples the input at (a qx + b qy + c, d qx + e qy + f)) against Image.rotate and Image.transform(AFFINE) on the
    smooth image, per sample in one batch (each sample its own matrix); outside the image, the fill. A broken op
    fails: the other rotation direction, the matrix inverted or transposed (shear), the fill ignored."""
    img = _smooth()
    pil = Image.fromarray(img)
    degrees = [20.0, -20.0, 7.5]
    x = _tensor([img] * len(degrees))
    out = device_augment.rotate(x.clone(), torch.tensor(degrees), FILL)
    for d, got in zip(degrees, out):
        ref = np.asarray(pil.rotate(d, resample=Image.BICUBIC, fillcolor=FILL)).astype(np.int64)
        assert np.abs(ref - _array(got)).mean() < GEOMETRY_BOUND, f"rotate({d})"
        mirrored = np.asarray(pil.rotate(-d, resample=Image.BICUBIC, fillcolor=FILL)).astype(np.int64)
        assert np.abs(mirrored - _array(got)).mean() > 4 * GEOMETRY_BOUND, f"rotate({d}) turns the other way"
    coeffs = [(1, 0.3, 0, 0, 1, 0), (1, 0, 0, -0.3, 1, 0), (1, 0, 6.5, 0, 1, -4.25), (0.9, 0.1, 3, -0.2, 1.1, 2)]
    x = _tensor([img] * len(coeffs))
    out = device_augment.affine(x.clone(), torch.tensor(coeffs, dtype=torch.float64), FILL)
    for c, got in zip(coeffs, out):
        ref = np.asarray(pil.transform(pil.size, Image.AFFINE, c, resample=Image.BICUBIC, fillcolor=FILL))
        assert np.abs(ref.astype(np.int64) - _array(got)).mean() < GEOMETRY_BOUND, f"affine{c}"
    # the fill: a translation by the whole width leaves only the fill
    shift = torch.tensor([[1, 0, SIZE[1] + 8, 0, 1, 0]], dtype=torch.float64)
    gone = device_augment.affine(_tensor([img]), shift, FILL)
    assert (gone[0] == torch.tensor(FILL, dtype=torch.float32).view(3, 1, 1)).all()


# ------------------------------------------------------------------------------------------ colour jitter
def test_color_jitter_plan_matches_torchvision():
    """ColorJitter(0.4)'s plan against torchvision's ColorJitter(0.4, 0.4, 0.4).get_params (timm's colour jitter
    without auto_augment): each factor uniform in [0.6, 1.4] (KS against torchvision's draws, and the range), the
    order of brightness, contrast and saturation each of the 6 permutations at rate 1/6. A broken plan fails: a
    fixed order, factors in [0, 0.4] or [0.8, 1.2], one factor shared by the three ops (correlation)."""
    g = _seed(6)
    torch.manual_seed(6)
    cj = transforms.ColorJitter(0.4, 0.4, 0.4)
    assert cj.hue is None
    ref_order, ref_f = [], []
    for _ in range(6000):
        fn_idx, b, c, s, _ = cj.get_params(cj.brightness, cj.contrast, cj.saturation, cj.hue)
        ref_order.append([int(k) for k in fn_idx if k != 3])
        ref_f.append((b, c, s))
    ref_order, ref_f = np.array(ref_order), np.array(ref_f)
    order, factors = (t.numpy() for t in device_augment.ColorJitter(0.4).plan(60000, g))
    assert order.shape == (60000, 3) and factors.shape == (60000, 3)
    assert (np.sort(order, 1) == [0, 1, 2]).all()
    assert factors.min() >= 0.6 and factors.max() <= 1.4
    for k, op in enumerate(("brightness", "contrast", "saturation")):
        assert_same_law(factors[:, k], ref_f[:, k], f"{op} factor")
    assert abs(np.corrcoef(factors.T)[np.triu_indices(3, 1)]).max() < 0.03  # independent factors
    for perm in ([0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]):
        hits, ref_hits = (order == perm).all(1).sum(), (ref_order == perm).all(1).sum()
        assert_rate(hits, len(order), 1 / 6, f"order {perm}")
        assert_same_rate(hits, len(order), ref_hits, len(ref_order), f"order {perm} (torchvision)")


def test_color_jitter_apply_matches_torchvision():
    """ColorJitter.apply with a plan against torchvision's adjust_brightness / adjust_contrast / adjust_saturation
    on the PIL image in the plan's order with its factors: within two levels (each op rounds to 8 bits, and a level
    off before a later op can grow by its factor) and without bias. A broken apply fails: the factors given to the
    wrong ops (e.g. brightness' factor used for contrast), the order ignored where clipping makes it matter."""
    images = _images(5)[:6]
    x = _tensor(images)
    n = len(images)
    order = torch.tensor([[0, 1, 2], [2, 1, 0], [1, 0, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1]])[:n]
    factors = torch.tensor([[0.6, 1.4, 1.0], [1.3, 0.7, 0.62], [1.4, 0.6, 1.39], [0.9, 1.2, 0.6], [0.65, 1.35, 1.3],
                            [1.1, 0.75, 1.25]], dtype=torch.float64)[:n]
    out = device_augment.ColorJitter(0.4).apply(x.clone(), (order, factors))
    adjust = (TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation)
    for i, img in enumerate(images):
        pil = Image.fromarray(img)
        for k in order[i].tolist():
            pil = adjust[k](pil, float(factors[i, k]))
        diff = _array(out[i]) - np.asarray(pil).astype(np.int64)
        assert np.abs(diff).max() <= 2 and abs(diff.mean()) < 0.05, f"image {i}: up to {np.abs(diff).max()} off"


def test_a_mixed_batch_is_each_sample_alone():
    """RandAugment.apply runs a layer as batched passes (tables, blends, one resampling) over samples that drew
    different ops, or none: every sample must come out as its own op alone would make it, op by op and layer by
    layer (a pass that touched the samples of another op, or missed its own, breaks the equality)."""
    ra = device_augment.RandAugment(CONFIG, IMAGENET_DEFAULT_MEAN, SIZE, "bicubic")
    x = _tensor(_images(47, seed=3))
    plan = ra.plan(len(x), torch.Generator().manual_seed(11))
    assert len({int(k) for idx, applied, _ in plan for k in idx[applied]}) >= 12  # the batch mixes the ops
    got = ra.apply(x.clone(), plan)
    want = x.clone()
    for idx, applied, arg in plan:
        for i in range(len(x)):
            if applied[i]:
                want[i] = _apply_one(ra, ra.names[idx[i]], want[i: i + 1], float(arg[i]))[0]
    assert torch.equal(got, want)
