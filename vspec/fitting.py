"""`vspec fit` / `vspec.fit`: the variant of a spec that costs what a budget allows, found from the spec alone.

The search is exhaustive over a small grid: each varied field (any dotted key `--set` takes) gets a list of values,
given (`dim=192,256`, `depth=4:12`, `depth=4:12:2`) or by default around its value (a width, a field whose name
ends in `dim`: half to twice it in steps of 8; another integer: 1 (or half) to twice it; a float: half to twice it
in eighths); every combination goes through the spec's validators (`override`: heads that divide the width,
windows that divide the grid, ...) and the valid ones are profiled on the meta device with one count per
distinct part for the whole search (`profile(cache=...)`: a depth adds no count, a width one per distinct block).
The variant nearest the target wins (relative deviation; ties to the one nearest the original values, then the
first); beyond `tolerance` the search fails with one line naming the nearest.

The search's size is counted before anything is profiled (a range is never listed: `range`, `FloatRange`) and
refused past `max_candidates` (default MAX_CANDIDATES): its candidates (the product of the axes' lengths), the
distinct combinations of the fields other than depths (each a new block to profile, about PART_COST candidates'
time: at most max_candidates // PART_COST) and the blocks its candidates walk (their depths summed: at most
BLOCKS_PER_CANDIDATE x max_candidates). Numbers are ASCII and finite.

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

from .search_ranges import FloatRange, WithValue, size
from .spec import Model, SpecError, load_spec, override, to_json, to_toml
from .spec.errors import printable, show
from .spec.load import WRITTEN_WHEN_SET, parse_value
from .spec.serialize import to_dict

__all__ = ["BLOCKS_PER_CANDIDATE", "Candidate", "DIM_STEP", "FitError", "FitResult", "MAX_CANDIDATES", "PART_COST",
           "axes", "check_search", "check_size", "default_vary", "deviation", "fit", "parse_amount", "search_size",
           "table", "write"]

_SUFFIXES = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
DIM_STEP = 8
# the largest search by default: every one-stage preset's default grid (at most 9,264 candidates: BERT-L, GPT-2 M)
# is under it; on 2 cores a candidate whose block is cached costs 3-25 ms (Swin's: ~55 ms), a new block 17-150 ms
MAX_CANDIDATES = 10_000
PART_COST = 5  # a distinct block costs about five cached candidates: at most max_candidates // PART_COST of them
BLOCKS_PER_CANDIDATE = 100  # each candidate walks its blocks (~0.01-0.03 ms each): a depth of 10,000 is no grid
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(nan|inf|infinity)", re.IGNORECASE)


class FitError(ValueError):
    """No variant within the tolerance (`.result` holds the search, its nearest first), or a malformed request."""

    def __init__(self, message: str, result: FitResult | None = None):
        super().__init__(printable(message))  # one line: a line break in a --vary item is escaped
        self.result = result


@attrs.frozen
class Candidate:
    """One variant of the search: its varied fields' values (dotted field -> value), its parameter and MAC
    counts, and its deviation from the target."""

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
    axes: dict[str, Sequence[Any]]
    tried: int
    seconds: float

    @property
    def rate(self) -> float:
        """Valid candidates profiled per second."""
        return len(self.candidates) / max(self.seconds, 1e-9)


def parse_amount(text: str) -> float:
    """'4.6G' -> 4.6e9; '22M', '1.5e6', '800K'.

    Args:
        text: the amount as written.
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtT]?)\s*", str(text))
    if not m:
        raise FitError(f"amount {show(text)}: expected a number with an optional K, M, G or T suffix, e.g. 4.6G")
    value = float(m.group(1)) * _SUFFIXES[m.group(2).upper()]
    if value <= 0:
        raise FitError(f"amount {show(text)}: must be > 0")
    return value


def _counts(spec: Model, cache: dict) -> tuple[int, int]:
    from .profiler import profile  # torch

    p = profile(spec, meta=True, crosscheck=False, cache=cache)
    return p.params, p.macs


def _field(spec: Model, key: str) -> Any:
    """The value at a dotted key, as `override` addresses it."""
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


def _number(key: str, text: str, part: str, kind: type) -> Any:
    """One bound or step of LOW:HIGH[:STEP]: ASCII digits only (int() would take '١٢'), finite."""
    try:
        if not (_INT if kind is int else _FLOAT).fullmatch(part.strip()):
            raise ValueError(part)
        value = kind(part)  # an int past Python's 4,300 digits: ValueError too
    except ValueError:
        raise FitError(f"--vary {key}={text}: expected LOW:HIGH[:STEP] of {kind.__name__}s (ASCII digits), got "
                       f"{show(part)}") from None
    if kind is float and not math.isfinite(value):
        raise FitError(f"--vary {key}={text}: {show(part)} is not a finite number")
    return value


def _parse_values(key: str, text: str, current: Any) -> Sequence[Any]:
    kind = float if isinstance(current, float) else int
    if ":" in text:
        parts = text.split(":")
        if len(parts) > 3:
            raise FitError(f"--vary {key}={text}: expected LOW:HIGH[:STEP] with LOW <= HIGH and STEP > 0")
        lo, hi, *step = (_number(key, text, p, kind) for p in parts)
        step = step[0] if step else 1
        if step <= 0 or hi < lo:
            raise FitError(f"--vary {key}={text}: expected LOW:HIGH[:STEP] with LOW <= HIGH and STEP > 0")
        if kind is int:
            return range(lo, hi + 1, step)
        n = (hi - lo) / step
        if not math.isfinite(n):  # e.g. -1e308:1e308
            raise FitError(f"--vary {key}={text}: more than 10**308 values; narrow --vary")
        return FloatRange(lo, step, math.floor(n + 1e-9) + 1)

    values = []
    for item in (v for v in text.split(",") if v.strip()):
        value = parse_value(item)
        if isinstance(value, float) and not math.isfinite(value):
            raise FitError(f"--vary {key}={text}: {show(item)} is not a finite number")
        if isinstance(current, (int, float)) and not isinstance(current, bool) and isinstance(value, str):
            raise FitError(f"--vary {key}={text}: {show(item)} is not a number (ASCII digits)")
        values.append(value)
    return list(dict.fromkeys(values))


def _default_values(key: str, current: Any) -> Sequence[Any]:
    if isinstance(current, bool) or not isinstance(current, (int, float)):
        raise FitError(f"--vary {key}: {show(current)} has no default range; give the values: {key}=V1,V2,...")
    if isinstance(current, float):
        return [round(current * f / 8, 10) for f in range(4, 17)]
    if key.split(".")[-1].endswith("dim"):
        lo = max(DIM_STEP, (current // 2) // DIM_STEP * DIM_STEP)
        widths = range(lo, 2 * current + 1, DIM_STEP)
        return widths if current in widths else WithValue(widths, current)  # the current width too, off the step
    return range(1 if key.split(".")[-1] == "depth" else max(1, current // 2), 2 * current + 1)


def axes(spec: Model, vary: Sequence[str]) -> dict[str, Sequence[Any]]:
    """Each varied key with its values: `KEY` (the default range), `KEY=V1,V2,...` or `KEY=LOW:HIGH[:STEP]`;
    a range is a lazy sequence (`range`, `FloatRange`, `WithValue`), never a list.

    Args:
        spec: the spec searched.
        vary: the `--vary` items.
    """
    out: dict[str, Sequence[Any]] = {}
    for item in vary:
        key, _, text = str(item).partition("=")
        key = key.strip()
        if key in out:
            raise FitError(f"--vary {key}: given twice")
        current = _field(spec, key)
        values = _parse_values(key, text, current) if text else _default_values(key, current)
        if not size(values):
            raise FitError(f"--vary {item}: no values")
        out[key] = values
    if not out:
        raise FitError("nothing to vary: name fields with --vary, e.g. --vary dim,depth")
    return out


def default_vary(spec: Model) -> list[str]:
    """The width, then the depth: `dim` and `depth` of a one-stage spec; every stage's `dim` and `depth` of a
    staged one would be a large grid, so those must be named.

    Args:
        spec: the spec searched (one stage).
    """
    if len(spec.stages) != 1:
        raise FitError("a spec of several stages: name the fields to vary (e.g. --vary stages.2.depth,embedder.dim)")
    return ["dim", "depth"]


def _is_depth(key: str) -> bool:
    return key.split(".")[-1] == "depth"


def _sum(values: Sequence[Any]) -> int:
    """The sum of an axis of depths (a range's in closed form); what is not an int counts as 0."""
    if isinstance(values, range):
        return size(values) * (values[0] + values[0] + (size(values) - 1) * values.step) // 2 if size(values) else 0
    return sum(v for v in values if isinstance(v, int) and not isinstance(v, bool))


def _size_of(spec: Model, grid: dict[str, Sequence[Any]]) -> dict[str, Any]:
    count = math.prod(size(v) for v in grid.values())
    parts = math.prod(size(v) for k, v in grid.items() if not _is_depth(k))
    blocks = count * sum(stage.depth for stage in spec.stages)  # each varied depth replaces its current value
    for k, v in grid.items():
        current = _field(spec, k)
        if _is_depth(k) and isinstance(current, int):
            blocks += count // size(v) * (_sum(v) - size(v) * current)
    return {"candidates": count, "parts": parts, "blocks": max(0, blocks),
            "axes": " x ".join(f"{_amount_int(size(v))} {k}" for k, v in grid.items()),
            "fields": ", ".join(k for k in grid if not _is_depth(k))}


def _grid(spec: Model, vary: Sequence[str] | None) -> dict[str, Sequence[Any]]:
    """The search's axes: over `vary`, default `default_vary`."""
    return axes(spec, list(vary) if vary else default_vary(spec))


def search_size(spec: Model | str | Path, vary: Sequence[str] | None = None) -> dict[str, int]:
    """What a search over `vary` (default `default_vary`) would do, counted without profiling: its `candidates`,
    the distinct combinations of the non-depth fields (`parts`) and the `blocks` its candidates walk.

    Args:
        spec: the spec searched (a Model, a file or a preset).
        vary: the `--vary` items (None: `default_vary`).
    """
    spec = spec if isinstance(spec, Model) else load_spec(spec)
    sizes = _size_of(spec, _grid(spec, vary))
    return {k: sizes[k] for k in ("candidates", "parts", "blocks")}


def check_search(spec: Model, vary: Sequence[str] | None = None, max_candidates: int = MAX_CANDIDATES) -> None:
    """FitError for a search over `vary` (default `default_vary`) past `max_candidates` (`check_size`); profiles
    nothing.

    Args:
        spec: the spec searched.
        vary: the `--vary` items (None: `default_vary`).
        max_candidates: the most candidates allowed.
    """
    check_size(_size_of(spec, _grid(spec, vary)), max_candidates)


def check_size(sizes: dict[str, Any], max_candidates: int = MAX_CANDIDATES) -> None:
    """FitError (one line: the count, the limit, --max-candidates) for a search past `max_candidates`:
    `sizes` as `search_size` counts them.

    Args:
        sizes: the search's counts (`search_size`'s).
        max_candidates: the most candidates allowed.
    """
    if not (isinstance(max_candidates, int) and not isinstance(max_candidates, bool) and max_candidates >= 1):
        raise FitError(f"max_candidates: must be an int >= 1, got {show(max_candidates)}")
    tail = "; narrow --vary or raise --max-candidates"
    if sizes["candidates"] > max_candidates:
        raise FitError(f"the search has {_amount_int(sizes['candidates'])} candidates"
                       + (f" ({sizes['axes']})" if sizes.get("axes") else "") + f", more than {max_candidates:,}{tail}")
    if sizes["parts"] > max_candidates // PART_COST:
        raise FitError(f"the search profiles {_amount_int(sizes['parts'])} distinct combinations of "
                       f"{sizes.get('fields') or 'its fields'} (each a new block to profile), more than "
                       f"{max_candidates // PART_COST:,} (1/{PART_COST} of --max-candidates){tail}")
    if sizes["blocks"] > max_candidates * BLOCKS_PER_CANDIDATE:
        raise FitError(f"the search walks {_amount_int(sizes['blocks'])} blocks (the candidates' depths summed), "
                       f"more than {max_candidates * BLOCKS_PER_CANDIDATE:,} ({BLOCKS_PER_CANDIDATE} x "
                       f"--max-candidates){tail}")


def _amount_int(n: int) -> str:
    """An int with thousands separators; past 10**60 its order of magnitude (no 5,000-digit line)."""
    return f"{n:,}" if n < 10**60 else f"about 10**{int(n.bit_length() * math.log10(2))}"


def deviation(params: int, macs: int, target: dict[str, float]) -> float:
    """The relative distance of (params, macs) from the target: of the one count it names, or the larger of two.

    Args:
        params: the variant's parameter count.
        macs: its MACs.
        target: `{"params": ..., "macs": ...}`, one or both.
    """
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
        tolerance: float = 0.02, max_candidates: int = MAX_CANDIDATES) -> FitResult:
    """The valid variant of `spec` nearest the target: `macs`, `params`, or both counts of `like`. Raises FitError
    naming the nearest when none is within `tolerance`, and before profiling a search past `max_candidates`.

    Args:
        spec: the spec varied (a Model, a file or a preset).
        macs: the target MACs (a number or '4.6G'; None: none).
        params: the target parameters (a number or '22M'; None: none).
        like: another spec, whose parameters and MACs are both the target (None: none).
        vary: the fields varied, as `--vary` items (None: `default_vary`).
        tolerance: the relative deviation accepted.
        max_candidates: the most candidates the search may have.
    """
    spec = spec if isinstance(spec, Model) else load_spec(spec)
    if not tolerance >= 0:
        raise FitError(f"tolerance: must be >= 0, got {tolerance!r}")
    if like is not None and (macs is not None or params is not None):
        raise FitError("give one target: like=SPEC, or macs= and / or params=")
    target: dict[str, float] = {}
    for name, value in (("params", params), ("macs", macs)):
        if value is not None:
            target[name] = parse_amount(value) if isinstance(value, str) else float(value)
            if not (math.isfinite(target[name]) and target[name] > 0):
                raise FitError(f"{name}: must be finite and > 0, got {value!r}")
    if not target and like is None:
        raise FitError("no target: give macs=, params= or like=SPEC")
    grid = _grid(spec, vary)
    check_size(_size_of(spec, grid), max_candidates)  # counted, before anything is profiled (like='s spec too)
    cache: dict = {}
    if like is not None:
        other = like if isinstance(like, Model) else load_spec(like)
        target["params"], target["macs"] = (float(v) for v in _counts(other, cache))
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
        raise FitError(f"no variant within {100 * tolerance:g} % of {_describe(target)}: the nearest, "
                       f"{_values_text(best.values)}, has {_counts_text(best)} ({100 * best.deviation:+.2f} %)",
                       result)
    return result


def _describe(target: dict[str, float]) -> str:
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
    """Markdown: the original, then the `top` nearest variants (the chosen one first).

    Args:
        result: the search's result.
        top: the variants listed.
    """
    keys = list(result.axes)
    head = "| | " + " | ".join(keys) + " | params | MACs | deviation |"
    lines = [(f"target {_describe(result.target)}; {len(result.candidates)} valid of {result.tried} combinations, "
              f"profiled in {result.seconds:.2f} s ({result.rate:.0f} / s)"), "", head,
             "|" + "---|" * (len(keys) + 4)]
    rows = [("original", result.original)] + [("chosen" if i == 0 else str(i + 1), c)
                                              for i, c in enumerate(result.candidates[:top])]
    for label, c in rows:
        lines.append(f"| {label} | " + " | ".join(str(c.values[k]) for k in keys)
                     + f" | {c.params:,} | {c.macs:,} | {100 * c.deviation:+.2f} % |")
    return "\n".join(lines)


def write(result: FitResult, path: Path, command: str = "") -> None:
    """The chosen spec as .json, .toml or .py (SPEC = from_json(...), with where it came from); missing folders
    above `path` are created.

    Args:
        result: the search's result.
        path: the file written (.json, .toml or .py).
        command: the command that made it, named in a .py file's header ("": vspec.fit).
    """
    suffix = path.suffix
    if suffix == ".json":
        text = to_json(result.spec) + "\n"
    elif suffix == ".toml":
        text = to_toml(result.spec)
    elif suffix == ".py":
        about = (f"{command or 'vspec.fit'}: {_values_text(result.best.values)}, {_counts_text(result.best)} "
                 f"({100 * result.best.deviation:+.2f} % from {_describe(result.target)})")
        text = ("".join(f"# {line}\n" for line in about.splitlines()) + "\nfrom vspec.spec import from_json\n\n"
                f"SPEC = from_json({to_json(result.spec)!r})\n")
    else:
        raise FitError(f"--out {show(str(path))}: expected a .json, .toml or .py file")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
