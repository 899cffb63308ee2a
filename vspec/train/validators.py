"""The validators of the training configuration (vspec/train/config.py), built on the spec layer's (`Range`, `OneOf`,
`Is`, `ConfigError`: vspec/spec/validators.py, which a paper's `Recipe` uses too): the flags' ranges, the
normalisation's, the workers', the text columns'. The command lines check their flags with the same objects (`vspec
train` after parsing, `vspec compare` as argparse types), so the Python API and the CLI refuse the same values with
the same words. Torch-free."""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Sequence

from .._moved import moved as _moved
from ..spec.errors import show
from ..spec.validators import F32_MAX, F32_TINY, ConfigError, Is, OneOf, Range, floats, ints, rule  # noqa: F401
from ..spec.weights import CROP_PCT

__all__ = [
    "CROP", "FINITE", "MAX_WORKERS", "MEAN", "POSITIVE_FLOAT", "POSITIVE_INT", "STD", "WORKERS", "check_normalisation",
    "cpu_count", "text_columns",
]

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
    "std", or "mean / std" for the pair).

    Args:
        mean: one value per channel.
        std: one value per channel."""
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


def cpu_count() -> int:
    """The cores this process may run on (its affinity: a container's or a job's cpuset), else the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# --workers' most (train, eval, label; per process): 4 per core, as a worker mostly waits on its reads (a network file
# system, a `pipe:` source), and at least 32, so that a published recipe's count (DeiT's 10, 16, 32) runs anywhere
MAX_WORKERS = max(32, 4 * cpu_count())
WORKERS = ints(0, MAX_WORKERS, optional=True, label=f"{MAX_WORKERS} (4 per core, at least 32)")


def text_columns(value) -> tuple[str, ...] | None:
    """--text-columns a[,b]: the text columns of a Hugging Face dataset, one (a sentence) or two (a pair), as a
    tuple; a string is split at its commas; None stays None. A ConfigError otherwise (a converter: `DataConfig`'s
    field and `Request`'s, so a command's raw flag is checked where it is used too).

    Args:
        value: the flag's or field's value: a string, a sequence of strings, or None."""
    if value is None:
        return None
    names = tuple(n.strip() for n in value.split(",")) if isinstance(value, str) else value
    if not (isinstance(names, (tuple, list)) and len(names) in (1, 2) and all(isinstance(n, str) and n.strip()
                                                                                for n in names)):
        raise ConfigError("text_columns", f"one or two column names, a[,b], got {show(value)}")
    if len(set(names)) < len(names):
        raise ConfigError("text_columns", f"two different columns, got {show(value)}")
    return tuple(names)


def __getattr__(name: str):  # cores, cpu_count's old name (vspec/_moved.py)
    return _moved(__name__, name)
