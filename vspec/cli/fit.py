"""`vspec fit SPEC --target macs=4.6G --vary dim,depth`: the variant of a spec nearest a parameter / MAC budget,
found from the spec alone (vspec/fitting.py)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from .. import fitting
from ..fitting import BLOCKS_PER_CANDIDATE, MAX_CANDIDATES, PART_COST
from ..spec.catalogue import spec_file
from .common import UsageError, int_in, load, nonnegative_float, output_file, printable, show, spec_args

__all__ = ["HELP", "NAME", "add_parser", "run", "vary_items"]

NAME = "fit"
HELP = "the variant of a spec (over the fields you name) nearest a MAC / parameter budget or another spec's counts"


def add_parser(sub) -> None:
    """Add `vspec fit`'s parser (its flags and help) to the command's subparsers.

    Args:
        sub: the `vspec` parser's subparsers action (`vspec.cli.parser`)."""
    f = sub.add_parser(NAME, help=HELP, description=(
        "Search the named fields of SPEC (each with given values, or a range around its value) for the valid "
        "variants nearest the target, counted on the meta device with one count per distinct part; print the "
        "original and the nearest variants (field values, params, MACs, deviation), and write the chosen spec "
        "with --out. Fails (exit 2) with one line naming the nearest when none is within --tolerance, and before "
        "anything is profiled for a search past --max-candidates or an --out path that cannot be written."))
    spec_args(f)
    f.add_argument("--target", required=True, metavar="WHAT=AMOUNT",
                   help="macs=4.6G, params=22M (K, M, G, T), both (macs=...,params=...), or like=SPEC: that spec's "
                        "parameters and MACs both")
    f.add_argument("--vary", action="append", default=[], metavar="KEY[=VALUES]",
                   help="a field to search, repeatable: KEY (a range around its value: a *dim half to twice it in "
                        "steps of 8 and its own value, an integer 1 or half to twice it, a float half to twice it in "
                        "eighths), KEY=V1,V2,... or KEY=LOW:HIGH[:STEP] (finite numbers, ASCII digits); bare keys "
                        "may be comma-separated (--vary dim,depth, the default for a one-stage spec)")
    f.add_argument("--tolerance", type=nonnegative_float, default=0.02, metavar="R",
                   help="the largest relative deviation accepted (default 0.02: 2 %%)")
    _max_candidates_flag(f)
    f.add_argument("--top", type=int_in(1), default=10, metavar="N", help="variants shown (default 10)")
    f.add_argument("--out", metavar="FILE", help="write the chosen spec: .json, .toml or .py (missing folders are "
                                                 "created; the path is checked before the search)")


def _max_candidates_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-candidates", type=int_in(1), default=None, metavar="N",
                   help=f"refuse, before anything is profiled, a search of more than N candidates (default "
                        f"{MAX_CANDIDATES:,}: every one-stage preset's default dim x depth grid is under it), of more "
                        f"than N/{PART_COST} distinct combinations of the fields other than depths (each a new block "
                        f"to profile), or whose candidates' depths sum past {BLOCKS_PER_CANDIDATE} x N")


def _parse_target(text: str) -> dict[str, str]:
    """'macs=4.6G' / 'params=22M' / 'macs=4.6G,params=22M' / 'like=SPEC' -> fit()'s keywords."""
    out: dict[str, str] = {}
    for item in text.split(",") if not text.startswith("like=") else [text]:
        name, eq, value = item.partition("=")
        if not eq or name not in ("macs", "params", "like") or not value:
            raise UsageError(f"vspec fit: error: --target {printable(text)}: expected macs=AMOUNT, params=AMOUNT "
                             "or like=SPEC")
        if name in out:
            raise UsageError(f"vspec fit: error: --target {show(text)}: {name} given twice; give each once")
        out[name] = str(spec_file(value)) if name == "like" else value
    return out


def vary_items(values: list[str]) -> list[str]:
    """--vary arguments as fit() takes them: 'dim,depth' is two keys; 'dim=192,256' one key with its values;
    'dim,depth=4:12' a bare key and one with values.

    Args:
        values: the --vary arguments, as given."""
    out = []
    for item in values:
        keys, eq, given = item.partition("=")
        *bare, last = keys.split(",")
        out += [k for k in bare if k] + ([f"{last}={given}"] if eq else [last] if last else [])
    return out


def run(args: argparse.Namespace) -> None:
    """Carry out `vspec fit` (called by `vspec.cli.main`; its errors become one line and exit 2).

    Args:
        args: the command line as `add_parser`'s parser parsed it."""
    out = output_file("--out", args.out) if args.out is not None else None  # before the search: a bad path
    if out is not None and out.suffix not in (".json", ".toml", ".py"):
        raise UsageError(f"vspec fit: error: --out {printable(args.out)}: expected a .json, .toml or .py file")
    target = _parse_target(args.target)
    spec = load(args)
    try:
        result = fitting.fit(spec, **target, vary=vary_items(args.vary) or None, tolerance=args.tolerance,
                             max_candidates=args.max_candidates or fitting.MAX_CANDIDATES)
    except fitting.FitError as e:
        if e.result is not None:
            print(fitting.table(e.result, args.top))
        raise UsageError(f"vspec fit: error: {e}") from None
    print(fitting.table(result, args.top))
    if out is not None:
        fitting.write(result, Path(out), "vspec fit " + shlex.join(sys.argv[2:]))
        print(printable(str(out)))
