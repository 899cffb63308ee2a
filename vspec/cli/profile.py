"""`vspec profile SPEC`: parameters and MACs per component and per op kind (vspec/profiler.py), with the papers'
counting conventions."""

from __future__ import annotations

import argparse
import json
import time

import attrs

from ..spec import SpecError, Tokens, budget
from .common import load, memory_flag, one_line, positive, printable, spec_args
from .tables import count, format_table, grouped, input_label, si, stage_labels

__all__ = ["HELP", "NAME", "add_parser", "run"]

NAME, HELP = "profile", "parameters and MACs per component"


def add_parser(sub) -> None:
    """Add `vspec profile`'s parser (its flags and help) to the command's subparsers.

    Args:
        sub: the `vspec` parser's subparsers action (`vspec.cli.parser`)."""
    p = sub.add_parser(NAME, help=HELP,
                       description="Count parameters and MACs (multiply-adds; FLOPs = 2 x MACs) per component "
                                   "and per op kind, on one image (or one sequence of a text body). Attention "
                                   "matmuls and norms are counted.")
    spec_args(p)
    p.add_argument("--input-size", type=positive, metavar="N",
                   help="square input size (default: the spec's img_size)")
    p.add_argument("--seq-len", type=positive, metavar="N",
                   help="a text body's sequence length (default: the spec's embedder.seq_len)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.add_argument("--meta", action="store_true",
                   help="count on the meta device with torch's FlopCounterMode (no weights allocated); "
                        "chosen automatically above 300 M parameters, or when the weights would not fit in the "
                        "memory available now")
    memory_flag(p, "the count moves to the meta device when the weights would not fit in the memory "
                   "available now, and a spec whose blocks would not fit even there is refused")


def run(args: argparse.Namespace) -> None:
    """Carry out `vspec profile` (called by `vspec.cli.main`; its errors become one line and exit 2).

    Args:
        args: the command line as `add_parser`'s parser parsed it."""
    from ..profiler import CONVENTIONS, profile  # torch

    spec = load(args)
    text = spec.embedder.text
    if text and args.input_size is not None:
        raise SpecError("", "--input-size: a text body takes no image; give its length with --seq-len")
    if not text and args.seq_len is not None:
        raise SpecError("", "--seq-len: an image model takes no token sequence; give its size with --input-size")
    if args.input_size is not None:
        spec = attrs.evolve(spec, img_size=args.input_size)  # re-validated: the patch must divide it
    if args.seq_len is not None:  # re-validated: the position table must hold it
        spec = attrs.evolve(spec, embedder=attrs.evolve(spec.embedder, seq_len=args.seq_len))
    free = budget.available() if args.memory_check else None
    meta = args.meta
    budget.check(spec, batch=0, tied=True, free=free, what="profiling it on the meta device")
    if not meta:
        from ..compiler import weights  # torch

        try:
            budget.check(spec, weights=weights(spec), tied=True, free=free, what="profiling it")
        except budget.MemoryBudgetError:  # too large to instantiate: count on the meta device
            meta = True
    t0 = time.perf_counter()
    try:
        prof = profile(spec, meta=True if meta else None, check_memory=False)  # checked above
    except RuntimeError as e:  # what the estimate missed: torch's own size limit
        if "overflow" not in str(e):
            raise
        raise budget.MemoryBudgetError("", f"too large for torch, even on the meta device ({one_line(e)})") from None
    elapsed = time.perf_counter() - t0
    if args.json:
        print(json.dumps(prof.to_dict(), indent=2))
        return
    rows = [["component", "params", "MACs"]]
    named = [(name, c.role, c.stage, c.index, (c.params, c.macs)) for name, c in prof.components.items()]
    labels = stage_labels(spec, [Tokens(s.dim, s.grid, s.prefix, sequence=text) for s in prof.stages])
    for name, times, (n, m) in grouped(named, labels):
        rows.append([name, count(n, times), count(m, times, si)])
    rows.append(["total", f"{prof.params:,}", si(prof.macs)])
    print(f"{printable(args.path)} at {input_label(spec).removesuffix(' input')}, batch 1 "
          "(MACs: multiply-adds, FLOPs = 2 x MACs; attention matmuls and norms counted)")
    print(format_table(rows))
    print(f"params: {prof.params:,} total, {prof.params_trainable:,} trainable, "
          f"{prof.params_weights:,} in linear / conv weights (MSF's convention)")
    print("by op: " + ", ".join(f"{op} {si(v)}" for op, v in sorted(prof.by_op.items(), key=lambda kv: -kv[1])))
    for name, value in prof.conventions.items():
        print(f"paper convention, {CONVENTIONS[name]}: {si(value)}")
    check = f"; cross-check FlopCounterMode {si(prof.crosscheck_macs)}" if prof.crosscheck_macs is not None else ""
    print(f"counter: {prof.counter}{check}; {prof.distinct_parts} distinct of {len(prof.components)} parts "
          f"counted in {elapsed:.1f} s")
    if prof.unsupported_ops:
        print(f"unsupported ops (counted as 0): {', '.join(prof.unsupported_ops)}")
