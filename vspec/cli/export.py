"""`vspec export PATH --out FILE`: a model (a checkpoint, a model folder, or a spec randomly initialised) as ONNX
(.onnx) or a torch.export program (.pt2), vspec/export.py."""

from __future__ import annotations

import argparse

from ..spec import SpecError
from ..spec.catalogue import is_checkpoint
from .common import UsageError, check_fit, int_in, load, one_line, output_file, printable, spec_args

__all__ = ["HELP", "NAME", "add_parser", "run"]

NAME, HELP = "export", "export to ONNX (.onnx) or a torch.export program (.pt2)"


def add_parser(sub) -> None:
    """Add `vspec export`'s parser (its flags and help) to the command's subparsers.

    Args:
        sub: the `vspec` parser's subparsers action (`vspec.cli.parser`)."""
    e = sub.add_parser(NAME, help=HELP,
                       description="Export a model (a vspec checkpoint, .pt, or a spec, randomly initialised) in eval "
                                   "mode: --out FILE.onnx (torch.onnx's dynamo exporter; needs pip install "
                                   "'vspec[export]') or FILE.pt2 (torch.export.load). Inputs: pixel_values, or a "
                                   "text body's input_ids and attention_mask; output: logits. The batch axis is "
                                   "dynamic unless --static-batch.")
    spec_args(e)
    e.add_argument("--out", required=True, metavar="FILE", help="FILE.onnx or FILE.pt2 (the suffix picks the format); "
                                                                  "a new path or a regular file (overwritten)")
    e.add_argument("--batch", type=int_in(1, 4096), default=2, metavar="N",
                   help="the batch traced, 1 to 4096 (default 2; 2 or more with a dynamic batch)")
    e.add_argument("--static-batch", action="store_true", help="fix the batch axis at --batch")
    e.add_argument("--opset", type=int_in(18, 30), metavar="N", help="ONNX opset, 18 to 30 (default: torch.onnx's)")
    e.add_argument("--check", action="store_true",
                   help="run the exported model (onnxruntime, or torch) and the eager one on a random batch (--batch "
                        "+ 1 with a dynamic batch) and print the max |difference| of the logits; above 1e-4 is an "
                        "error")


def run(args: argparse.Namespace) -> None:
    """Carry out `vspec export` (called by `vspec.cli.main`; its errors become one line and exit 2).

    Args:
        args: the command line as `add_parser`'s parser parsed it."""
    from ..export import ExportError, export, target  # torch

    out = output_file("--out", args.out)
    try:
        target(out, args.opset, args.check, args.batch, not args.static_batch)  # before any work
    except ExportError as e:
        raise UsageError(f"vspec export: error: {one_line(e)}") from None
    if is_checkpoint(args.path):  # a checkpoint or a model folder: vspec.load
        from ..weights.loading import load as load_model  # torch

        if args.overrides:
            raise SpecError("", "--set applies to spec files, not to a checkpoint's trained model")
        model = load_model(args.path)
    else:
        from ..compiler import build  # torch

        spec = load(args)
        check_fit(spec, args.batch + 1, "exporting it")
        model = build(spec, check_memory=False)  # checked above, with the check's batch
    try:
        seconds, checked = export(model, out, batch=args.batch, dynamic_batch=not args.static_batch,
                                  opset=args.opset, verify=args.check)
    except ExportError as e:
        raise UsageError(f"vspec export: error: {one_line(e)}") from None
    print(f"{printable(str(out))}: exported in {seconds:.1f} s")
    if checked is not None:
        print(f"check: max |exported - eager| = {checked.max_abs_diff:.3g} over the logits of a batch of "
              f"{checked.batch} ({checked.runtime})")
