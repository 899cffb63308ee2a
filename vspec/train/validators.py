"""The validators of the training configuration (vspec/train/config.py, recipes.py), in the spec's style: an attrs
validator that refuses a value with one line naming the field (`epochs: must be in [1, 100000], got -1`). The
command lines check their flags with the same objects (`vspec train` after parsing, `vspec compare` as argparse
types), so the Python API and the CLI refuse the same values with the same words. Torch-free."""

from __future__ import annotations

import math
import numbers
import os
import struct
from collections.abc import Sequence
from typing import Any

import attrs

from ..spec.core import show
from ..spec.weights import CROP_PCT


class ConfigError(ValueError):
    """A training configuration's field holds a value it cannot take; `field` names it, `message` the rule."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


F32_MAX, F32_TINY = 3.4028234663852886e38, 1.1754943508222875e-38  # float32's largest and smallest normal number


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@attrs.frozen
class Range:
    """A number (`kind`: int or float) within bounds; None too when `optional`. A float must be finite unless
    `finite` is False (then only NaN is refused), and with `float32` a number float32 holds (0, or a magnitude in
    [F32_TINY, F32_MAX]: torch computes with it in float32); `label` writes the upper bound (`2**32`)."""

    kind: type
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    optional: bool = False
    finite: bool = True
    label: str | None = None
    float32: bool = False

    @property
    def rule(self) -> str:
        if self.low is None:
            return ""
        low, high = _bound(self.low), self.label or (self.high is not None and _bound(self.high))
        if self.high is None:
            return f"{'>' if self.open_low else '>='} {low}"
        return f"in {'(' if self.open_low else '['}{low}, {high}{')' if self.open_high else ']'}"

    def __call__(self, instance, attribute, value) -> None:
        self.check(attribute.name, value)

    def check(self, field: str, value: Any) -> None:
        if value is None and self.optional:
            return
        kind = numbers.Integral if self.kind is int else numbers.Real
        if isinstance(value, bool) or not isinstance(value, kind):
            what = "an int" if self.kind is int else "a number"
            raise ConfigError(field, f"must be {' '.join(filter(None, (what, self.rule)))}, got {show(value)}")
        finite = ("finite" + (" and " if self.rule else "")) if self.kind is float and self.finite else ""
        fits = not math.isnan(value) and (math.isfinite(value) or not finite) and (
            self.low is None or (value > self.low if self.open_low else value >= self.low)) and (
            self.high is None or (value < self.high if self.open_high else value <= self.high))
        if not fits:
            raise ConfigError(field, f"must be {finite}{self.rule}, got {show(value)}")
        if self.float32 and value != 0 and not F32_TINY <= abs(value) <= F32_MAX:
            zero = "0, or " if self.low is None or self.low < 0 or (self.low == 0 and not self.open_low) else ""
            raise ConfigError(field, f"must be a number float32 holds ({zero}a magnitude from {F32_TINY:.4g} to "
                                     f"{F32_MAX:.4g}), got {show(value)}")


def ints(low: int, high: int | None = None, **kw) -> Range:
    return Range(int, low, high, **kw)


def floats(low: float, high: float | None = None, **kw) -> Range:
    return Range(float, low, high, **kw)


@attrs.frozen
class OneOf:
    """One of `choices` (None too when `optional`)."""

    choices: tuple
    optional: bool = False

    def __call__(self, instance, attribute, value) -> None:
        self.check(attribute.name, value)

    def check(self, field: str, value: Any) -> None:
        if not (value is None and self.optional) and value not in self.choices:
            raise ConfigError(field, f"must be one of {', '.join(map(str, self.choices))}, got {show(value)}")


@attrs.frozen
class Is:
    """An instance of `types` (None too when `optional`)."""

    types: tuple[type, ...]
    optional: bool = False

    def __call__(self, instance, attribute, value) -> None:
        self.check(attribute.name, value)

    def check(self, field: str, value: Any) -> None:
        if not (value is None and self.optional) and not isinstance(value, self.types):
            names = " or ".join(t.__name__ for t in self.types)
            raise ConfigError(field, f"must be {names}{' or None' if self.optional else ''}, got {show(value)}")


def rule(cls: type, field: str):
    """The validator of `cls`'s field `field` (a `Range`, `OneOf` or `Is`): what a command checks its flag with."""
    return attrs.fields_dict(cls)[field].validator


# for a flag with no field of its own (eval's --crop-pct, --img-size)
POSITIVE_INT, POSITIVE_FLOAT, FINITE = ints(1), floats(0, open_low=True), Range(float)
# each value of --mean / --std (train, eval, label), and of any mean / std `check_normalisation` is given
MEAN, STD = Range(float, float32=True), floats(0, open_low=True, float32=True)


def _as_float32(value: float) -> float:
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:  # beyond float32's largest: what torch's cast gives
        return math.copysign(math.inf, value)


def check_normalisation(mean: Sequence, std: Sequence) -> None:
    """The per-channel mean and std of `(x - mean) / std` on pixels x in [0, 1]: each value by `MEAN` / `STD`,
    and what torch computes with them finite in float32 (a huge mean over a tiny std overflows though each fits;
    the device's normalisation scales both by 255, as timm's prefetcher): a ConfigError naming the field ("mean",
    "std", or "mean / std" for the pair)."""
    for field, rule_, values in (("mean", MEAN, mean), ("std", STD, std)):
        for value in values:
            rule_.check(field, value)
    for i, (m, s) in enumerate(zip(mean, std)):
        m32, s32 = _as_float32(m), _as_float32(s)
        terms = (("mean", "255 x mean", 255 * m32), ("std", "255 x std", 255 * s32),
                 ("mean / std", "(x - mean) / std", max(abs(m32), abs(1 - m32)) / s32))
        for field, what, value in terms:
            if not math.isfinite(_as_float32(value)):
                raise ConfigError(field, f"{what} reaches {abs(value):.4g} with mean {m:g} and std {s:g} (channel "
                                         f"{i}; pixels x in [0, 1]): beyond float32's {F32_MAX:.4g}")


CROP = floats(*CROP_PCT)  # a crop fraction: `Preprocess.crop_pct`'s range


def cores() -> int:
    """The cores this process may run on (its affinity: a container's or a job's cpuset), else the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# --workers' most (train, eval, label; per process): 4 per core, as a worker mostly waits on its reads (a network file
# system, a `pipe:` source), and at least 32, so that a published recipe's count (DeiT's 10, 16, 32) runs anywhere
MAX_WORKERS = max(32, 4 * cores())
WORKERS = ints(0, MAX_WORKERS, optional=True, label=f"{MAX_WORKERS} (4 per core, at least 32)")


def text_columns(value) -> tuple[str, ...] | None:
    """--text-columns a[,b]: the text columns of a Hugging Face dataset, one (a sentence) or two (a pair), as a
    tuple; a string is split at its commas; None stays None. A ConfigError otherwise (a converter: `DataConfig`'s
    field and `Request`'s, so a command's raw flag is checked where it is used too)."""
    if value is None:
        return None
    names = tuple(n.strip() for n in value.split(",")) if isinstance(value, str) else value
    if not (isinstance(names, (tuple, list)) and len(names) in (1, 2) and all(isinstance(n, str) and n.strip()
                                                                                for n in names)):
        raise ConfigError("text_columns", f"one or two column names, a[,b], got {show(value)}")
    if len(set(names)) < len(names):
        raise ConfigError("text_columns", f"two different columns, got {show(value)}")
    return tuple(names)
