"""`vspec fit` / `vspec.fit`: the variant of a spec that costs what a budget allows, found from the spec alone.

The search is exhaustive over a small grid: each varied field (any dotted key `--set` takes) gets a list of values,
given (`dim=192,256`, `depth=4:12`, `depth=4:12:2`) or by default around its value (a width, a field whose name
ends in `dim`: half to twice it in steps of 8; another integer: 1 (or half) to twice it; a float: half to twice it
in eighths); every combination goes through the spec's validators (`override`: heads that divide the width,
windows that divide the grid, ...) and the valid ones are profiled on the meta device with one count per
distinct part for the whole search (`profile(cache=...)`: a depth adds no count, a width one per distinct block).
The variant nearest the target wins (relative deviation; ties to the one nearest the original values, then the
first); beyond `tolerance` the search fails with one line naming the nearest.

Targets: `macs=4.6G`, `params=22M` (K, M, G, T suffixes), or `like=SPEC`: the other spec's parameters and MACs
both, the deviation being the larger of the two. Counts follow `vspec.profile` (all MACs, batch 1, the spec's
image size), so the table's numbers are what `vspec profile` prints for the chosen spec.
"""

from __future__ import annotations

import itertools
import math
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from .spec import Model, SpecError, load_spec, override
from .spec.core import show

SUFFIXES = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
DIM_STEP = 8


class FitError(ValueError):
    """No variant within the tolerance (`.result` holds the search, its nearest first), or a malformed request."""

    def __init__(self, message: str, result: FitResult | None = None):
        super().__init__(message)
        self.result = result


@attrs.frozen
class Candidate:
    values: dict[str, Any]
    params: int
    macs: int
    deviation: float  # relative, signed: (count - target) / target; with two targets the larger in size


@attrs.frozen
class FitResult:
    """The chosen spec, its field values and counts; `candidates` (every valid variant, nearest first), the target
    (`{"macs": ..., "params": ...}`, one or both), the original's counts, and the search's size and time."""

    spec: Model
    best: Candidate
    candidates: list[Candidate]
    target: dict[str, float]
    original: Candidate
    axes: dict[str, list[Any]]
    tried: int
    seconds: float

    @property
    def rate(self) -> float:
        """Valid candidates profiled per second."""
        return len(self.candidates) / max(self.seconds, 1e-9)


def parse_amount(text: str) -> float:
    """'4.6G' -> 4.6e9; '22M', '1.5e6', '800K'."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtT]?)\s*", str(text))
    if not m:
        raise FitError(f"amount {show(text)}: expected a number with an optional K, M, G or T suffix, e.g. 4.6G")
    value = float(m.group(1)) * SUFFIXES[m.group(2).upper()]
    if value <= 0:
        raise FitError(f"amount {show(text)}: must be > 0")
    return value


def _counts(spec: Model, cache: dict) -> tuple[int, int]:
    from .profiler import profile

    p = profile(spec, meta=True, crosscheck=False, cache=cache)
    return p.params, p.macs


def _field(spec: Model, key: str) -> Any:
    """The value at a dotted key, as `override` addresses it."""
    from .spec.load import WRITTEN_WHEN_SET
    from .spec.serialize import to_dict

    tree: Any = {**WRITTEN_WHEN_SET, **to_dict(spec)}
    for part in key.split("."):
        if isinstance(tree, dict) and part in tree:
            tree = tree[part]
        elif isinstance(tree, list) and part.isdigit() and int(part) < len(tree):
            tree = tree[int(part)]
        else:
            raise FitError(f"--vary {key}: the spec has no field {show(key)} (the keys --set takes, e.g. dim, depth, "
                           f"block.attention.heads, stages.1.depth)")
    return tree


def _parse_values(key: str, text: str, current: Any) -> list[Any]:
    kind = float if isinstance(current, float) else int
    if ":" in text:
        parts = text.split(":")
        try:
            lo, hi, *step = (kind(p) for p in parts)
        except ValueError:
            raise FitError(f"--vary {key}={text}: expected LOW:HIGH[:STEP] of {kind.__name__}s") from None
        step = step[0] if step else 1
        if len(parts) > 3 or step <= 0 or hi < lo:
            raise FitError(f"--vary {key}={text}: expected LOW:HIGH[:STEP] with LOW <= HIGH and STEP > 0")
        n = int(math.floor((hi - lo) / step + 1e-9)) + 1
        return [kind(lo + i * step) if kind is int else round(lo + i * step, 10) for i in range(n)]
    from .spec.load import parse_value

    return [parse_value(v) for v in text.split(",") if v.strip()]


def _default_values(key: str, current: Any) -> list[Any]:
    if isinstance(current, bool) or not isinstance(current, (int, float)):
        raise FitError(f"--vary {key}: {show(current)} has no default range; give the values: {key}=V1,V2,...")
    if isinstance(current, float):
        return [round(current * f / 8, 10) for f in range(4, 17)]
    if key.split(".")[-1].endswith("dim"):
        lo = max(DIM_STEP, (current // 2) // DIM_STEP * DIM_STEP)
        return sorted({*range(lo, 2 * current + 1, DIM_STEP), current})  # the current width too, off the step
    return list(range(1 if key.split(".")[-1] == "depth" else max(1, current // 2), 2 * current + 1))


def axes(spec: Model, vary: Sequence[str]) -> dict[str, list[Any]]:
    """Each varied key with its values: `KEY` (the default range), `KEY=V1,V2,...` or `KEY=LOW:HIGH[:STEP]`."""
    out: dict[str, list[Any]] = {}
    for item in vary:
        key, _, text = str(item).partition("=")
        key = key.strip()
        if key in out:
            raise FitError(f"--vary {key}: given twice")
        current = _field(spec, key)
        values = _parse_values(key, text, current) if text else _default_values(key, current)
        if not values:
            raise FitError(f"--vary {item}: no values")
        out[key] = list(dict.fromkeys(values))
    if not out:
        raise FitError("nothing to vary: name fields with --vary, e.g. --vary dim,depth")
    return out


def default_vary(spec: Model) -> list[str]:
    """The width, then the depth: `dim` and `depth` of a one-stage spec; every stage's `dim` and `depth` of a
    staged one would be a large grid, so those must be named."""
    if len(spec.stages) != 1:
        raise FitError("a spec of several stages: name the fields to vary (e.g. --vary stages.2.depth,embedder.dim)")
    return ["dim", "depth"]


def deviation(params: int, macs: int, target: dict[str, float]) -> float:
    """The relative distance of (params, macs) from the target: of the one count it names, or the larger of two."""
    devs = [(params - target["params"]) / target["params"]] if "params" in target else []
    devs += [(macs - target["macs"]) / target["macs"]] if "macs" in target else []
    return max(devs, key=abs)


def _distance(values: dict[str, Any], original: dict[str, Any]) -> float:
    """How far a candidate moved from the original values (log ratios of numbers; 1 per other change)."""
    total = 0.0
    for k, v in values.items():
        o = original[k]
        if isinstance(v, (int, float)) and isinstance(o, (int, float)) and v > 0 and o > 0:
            total += abs(math.log(v / o))
        else:
            total += v != o
    return total


def fit(spec: Model | str | Path, *, macs: float | str | None = None, params: float | str | None = None,
        like: Model | str | Path | None = None, vary: Sequence[str] | None = None,
        tolerance: float = 0.02) -> FitResult:
    """The valid variant of `spec` (over the `vary` fields, default `default_vary`) nearest the target: `macs`,
    `params` (numbers or '4.6G' / '22M'), or `like` (another spec: both its counts). Raises FitError naming the
    nearest when none is within `tolerance` (relative)."""
    spec = spec if isinstance(spec, Model) else load_spec(spec)
    if not tolerance >= 0:
        raise FitError(f"tolerance: must be >= 0, got {tolerance!r}")
    cache: dict = {}
    target: dict[str, float] = {}
    if like is not None:
        if macs is not None or params is not None:
            raise FitError("give one target: like=SPEC, or macs= and / or params=")
        other = like if isinstance(like, Model) else load_spec(like)
        target["params"], target["macs"] = (float(v) for v in _counts(other, cache))
    for name, value in (("params", params), ("macs", macs)):
        if value is not None:
            target[name] = parse_amount(value) if isinstance(value, str) else float(value)
            if not (math.isfinite(target[name]) and target[name] > 0):
                raise FitError(f"{name}: must be finite and > 0, got {value!r}")
    if not target:
        raise FitError("no target: give macs=, params= or like=SPEC")
    grid = axes(spec, list(vary) if vary else default_vary(spec))
    original_values = {k: _field(spec, k) for k in grid}
    p0, m0 = _counts(spec, cache)  # first: torch's start-up in a fresh process is not the search's
    original = Candidate(original_values, p0, m0, deviation(p0, m0, target))
    found: list[tuple[Candidate, Model]] = []
    tried, t0 = 0, time.perf_counter()
    for combo in itertools.product(*grid.values()):
        tried += 1
        values = dict(zip(grid, combo))
        try:
            variant = override(spec, values)
        except SpecError:
            continue
        n_params, n_macs = _counts(variant, cache)
        found.append((Candidate(values, n_params, n_macs, deviation(n_params, n_macs, target)), variant))
    seconds = time.perf_counter() - t0
    if not found:
        raise FitError(f"no valid variant among the {tried} combinations of {', '.join(grid)}: widen the ranges")
    order = sorted(range(len(found)), key=lambda i: (abs(found[i][0].deviation),
                                                     _distance(found[i][0].values, original_values), i))
    best, best_spec = found[order[0]]
    result = FitResult(best_spec, best, [found[i][0] for i in order], target, original, grid, tried, seconds)
    if abs(best.deviation) > tolerance:
        raise FitError(f"no variant within {100 * tolerance:g} % of {describe(target)}: the nearest, "
                       f"{_values_text(best.values)}, has {_counts_text(best)} ({100 * best.deviation:+.2f} %)",
                       result)
    return result


def describe(target: dict[str, float]) -> str:
    return " and ".join(f"{k}={_amount(v)}" for k, v in sorted(target.items(), reverse=True))


def _amount(v: float) -> str:
    for suffix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if v >= scale:
            return f"{v / scale:.4g}{suffix}"
    return f"{v:g}"


def _values_text(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _counts_text(c: Candidate) -> str:
    return f"{_amount(c.params)} params, {_amount(c.macs)} MACs"


def table(result: FitResult, top: int = 10) -> str:
    """Markdown: the original, then the `top` nearest variants (the chosen one first)."""
    keys = list(result.axes)
    head = "| | " + " | ".join(keys) + " | params | MACs | deviation |"
    lines = [f"target {describe(result.target)}; {len(result.candidates)} valid of {result.tried} combinations, "
             f"profiled in {result.seconds:.2f} s ({result.rate:.0f} / s)", "", head,
             "|" + "---|" * (len(keys) + 4)]
    rows = [("original", result.original)] + [("chosen" if i == 0 else str(i + 1), c)
                                              for i, c in enumerate(result.candidates[:top])]
    for label, c in rows:
        lines.append(f"| {label} | " + " | ".join(str(c.values[k]) for k in keys)
                     + f" | {c.params:,} | {c.macs:,} | {100 * c.deviation:+.2f} % |")
    return "\n".join(lines)


def write(result: FitResult, path: Path, command: str = "") -> None:
    """The chosen spec as .json, .toml or .py (SPEC = from_json(...), with where it came from)."""
    from .spec import to_json, to_toml

    suffix = path.suffix
    if suffix == ".json":
        text = to_json(result.spec) + "\n"
    elif suffix == ".toml":
        text = to_toml(result.spec)
    elif suffix == ".py":
        about = (f"{command or 'vspec.fit'}: {_values_text(result.best.values)}, {_counts_text(result.best)} "
                 f"({100 * result.best.deviation:+.2f} % from {describe(result.target)})")
        text = ("".join(f"# {line}\n" for line in about.splitlines()) + "\nfrom vspec.spec import from_json\n\n"
                f"SPEC = from_json({to_json(result.spec)!r})\n")
    else:
        raise FitError(f"--out {show(str(path))}: expected a .json, .toml or .py file")
    path.write_text(text)
