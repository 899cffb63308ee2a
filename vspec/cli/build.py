"""`vspec build SPEC`: validate and build a spec, run one forward pass on a dummy batch and print its parameters
per component; `--out` writes a checkpoint or a model folder."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from ..spec import SpecError, to_json
from .common import (
    check_fit,
    load,
    memory_flag,
    one_line,
    output_file,
    output_folder,
    positive,
    pretrained_flag,
    printable,
    spec_args,
)
from .tables import count, describe, format_table, grouped, input_label, stage_labels
from .weights import source_text

__all__ = ["HELP", "NAME", "add_parser", "run"]

NAME, HELP = "build", "validate, build and run one forward pass; print a summary"


def add_parser(sub) -> None:
    """Add `vspec build`'s parser (its flags and help) to the command's subparsers.

    Args:
        sub: the `vspec` parser's subparsers action (`vspec.cli.parser`)."""
    b = sub.add_parser(NAME, help=HELP, description="Validate and build a spec, run one forward pass on a dummy "
                                                    "batch and print per-component parameters and the output shape.")
    spec_args(b)
    b.add_argument("--json", action="store_true", help="print the (overridden) spec as JSON instead of the summary")
    b.add_argument("--out", metavar="FILE",
                   help="write a checkpoint (spec JSON + weights); reload with vspec.load(FILE); missing "
                        "folders are created; a new path or a regular file (overwritten), nothing else; "
                        "with --save-format folder: a model folder")
    b.add_argument("--save-format", choices=("pt", "folder"), default="pt",
                   help="what --out writes: pt (one checkpoint file; default) or folder (a model folder, "
                        "OUT/config.json + OUT/model.safetensors, the layout Hugging Face tools move; reload with "
                        "vspec.from_pretrained(OUT); OUT is a new path or a folder)")
    b.add_argument("--batch-size", type=positive, default=1, metavar="N", help="dummy batch size (default 1)")
    pretrained_flag(b)
    memory_flag(b, "a spec whose weights and forward pass (estimated from the spec) need more than the "
                   "memory available now is refused before anything is allocated")


def _save(model: Any, path: Path, folder: bool = False) -> None:
    from ..weights.checkpoint import save  # torch
    from ..weights.folder import save_pretrained  # torch

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        (save_pretrained if folder else save)(model, path)
    except (OSError, RuntimeError, SafetensorError) as e:  # torch.save reports write failures as RuntimeError
        what = "model folder" if folder else "checkpoint"
        raise SpecError("", f"--out {path}: could not write the {what} ({one_line(e)})") from None


def run(args: argparse.Namespace) -> None:
    """Carry out `vspec build` (called by `vspec.cli.main`; its errors become one line and exit 2).

    Args:
        args: the command line as `add_parser`'s parser parsed it."""
    spec = load(args)
    folder = args.save_format == "folder"
    out = None if args.out is None else output_folder("--out", args.out) if folder else output_file("--out", args.out)
    if args.memory_check:
        check_fit(spec, args.batch_size, "building it and running a forward pass")
    if args.json:
        print(to_json(spec))
    import torch  # torch

    from ..compiler import build  # torch
    from ..profiler import part_params  # torch

    if args.pretrained:  # fetched before the build: weights that cannot be had are said at once
        from ..weights.published import load_into, published  # torch

        got = published(args.path, args.pretrained)
    t0 = time.perf_counter()
    model = build(spec, check_memory=False).eval()  # checked above, with the forward pass's activations
    if args.pretrained:
        entry, fresh = load_into(model, got)
    x = model.example_input(args.batch_size)
    with torch.no_grad():
        y = model(x)
    elapsed = time.perf_counter() - t0
    if out is not None:
        _save(model, out, folder)
    if args.json:
        return
    parts = model.parts()
    counts = [part_params(p) for p in parts]
    total, trainable, weights = (sum(c[i] for c in counts) for i in range(3))
    rows = [["component", "params"]]
    named = [(p.name, p.role, p.stage, p.index, (c[0],)) for p, c in zip(parts, counts)]
    for name, times, (n,) in grouped(named, stage_labels(spec, [s.tokens for s in model.layout])):
        rows.append([name, count(n, times)])
    print(f"{printable(args.path)}: {describe(spec)}, {spec.num_classes} classes, {input_label(spec)}")
    print(format_table(rows))
    print(f"total: {total:,} parameters ({trainable:,} trainable, {weights:,} in linear / conv weights)")
    print(f"forward {tuple(x.shape)} -> {tuple(y.shape)}: finite={bool(torch.isfinite(y).all())}, "
          f"{elapsed:.2f} s to build and run")
    if args.pretrained:
        print(f"weights: {source_text(entry.source)}{'' if got.verified else ' (unverified)'} ({entry.licence})" +
              (f"; fresh: {', '.join(fresh)}" if fresh else ""))
    if out is not None:
        print(f"checkpoint: {printable(str(out))}")
