"""The validators of the settings beside a spec (a paper's `Recipe`, the training configuration: vspec/train/config.py),
in the spec's style: an attrs validator that refuses a value with one line naming the field (`epochs: must be in
[1, 100000], got -1`), a `ConfigError`. The command lines check their flags with the same objects (`rule`), so the
Python API and the CLI refuse the same values with the same words; the training configuration's own rules are in
vspec/train/validators.py. Torch-free."""

from __future__ import annotations

import math
import numbers
from typing import Any

import attrs

from .errors import show

__all__ = ["ConfigError", "Is", "OneOf", "Range", "floats", "ints", "rule"]


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
        """The bounds as a message says them (`>= 1`, `in [0, 1)`); "" without bounds."""
        if self.low is None:
            return ""
        low, high = _bound(self.low), self.label or (self.high is not None and _bound(self.high))
        if self.high is None:
            return f"{'>' if self.open_low else '>='} {low}"
        return f"in {'(' if self.open_low else '['}{low}, {high}{')' if self.open_high else ']'}"

    def __call__(self, instance, attribute, value) -> None:
        self.check(attribute.name, value)

    def check(self, field: str, value: Any) -> None:
        """ConfigError naming `field` where `value` is not a number within the bounds."""
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
    """A `Range` of ints from `low` to `high` (inclusive unless `open_low` / `open_high`).

    Args:
        low: the least value.
        high: the greatest value; None for no bound above.
        **kw: the other fields of `Range` (open_low, open_high, optional, label, ...).
    """
    return Range(int, low, high, **kw)


def floats(low: float, high: float | None = None, **kw) -> Range:
    """A `Range` of finite numbers from `low` to `high` (inclusive unless `open_low` / `open_high`).

    Args:
        low: the least value.
        high: the greatest value; None for no bound above.
        **kw: the other fields of `Range` (open_low, open_high, optional, finite, float32, ...).
    """
    return Range(float, low, high, **kw)


@attrs.frozen
class OneOf:
    """One of `choices` (None too when `optional`)."""

    choices: tuple
    optional: bool = False

    def __call__(self, instance, attribute, value) -> None:
        self.check(attribute.name, value)

    def check(self, field: str, value: Any) -> None:
        """ConfigError naming `field` where `value` is not one of the choices."""
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
        """ConfigError naming `field` where `value` is not of the types."""
        if not (value is None and self.optional) and not isinstance(value, self.types):
            names = " or ".join(t.__name__ for t in self.types)
            raise ConfigError(field, f"must be {names}{' or None' if self.optional else ''}, got {show(value)}")


def rule(cls: type, field: str):
    """The validator of `cls`'s field `field` (a `Range`, `OneOf` or `Is`): what a command checks its flag with.

    Args:
        cls: the attrs class (a config's).
        field: the field's name.
    """
    return attrs.fields_dict(cls)[field].validator
