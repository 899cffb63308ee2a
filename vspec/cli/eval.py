"""`vspec eval CHECKPOINT` and tools/eval.py (the same command): the command line that evaluates a checkpoint or a
model folder on the validation split, top-1 / top-5 and images/s, or a text task's metrics
(`vspec.train.evaluate.evaluate_checkpoint`)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from .._moved import moved
from ..train.config import DataConfig, RunConfig
from ..train.recipes import Recipe
from ..train.validators import CROP, MEAN, POSITIVE_INT, STD, rule
from .common import OneLineParser, one_line_warnings, pretrained_flag, printable
from .fields import field_rules
from .train import check_flags, data_args, errors, report

__all__ = ["HELP", "NAME", "eval_parser", "eval_rules", "main"]

_EVAL_RUN = ("seed", "workers", "device")  # the run's fields that evaluation takes too (flags of `data_args`)
NAME, HELP = "eval", "evaluate a checkpoint or a model folder (tools/eval.py's command: the same arguments)"


def eval_parser(prog: str = "eval.py") -> argparse.ArgumentParser:
    """The parser of `vspec eval` and tools/eval.py (the same arguments).

    Args:
        prog: the program's name in usage and error lines."""
    p = OneLineParser(prog=prog, description="Evaluate a checkpoint (from tools/train.py or vspec build --out) "
                "or a model folder (vspec.save_pretrained, --save-format folder): top-1 / top-5 and images/s on the "
                "validation split.")
    p.add_argument("checkpoint", type=Path, metavar="CHECKPOINT",
                   help="a checkpoint (.pt), a model folder, or with --pretrained a preset's name or .py file")
    pretrained_flag(p, "evaluate")
    data_args(p, _EVAL_RUN)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--ema", action="store_true", help="evaluate the EMA weights of a training checkpoint")
    p.add_argument("--crop-pct", "--crop-ratio", dest="crop_pct", type=float, metavar="RATIO",
                   help="test-time resize = size / ratio (in [0.25, 4]), then a center crop to the spec's size; a "
                        "ratio > 1 pads instead of cropping (Refiner's receptive-field calibration). Default: the "
                        "published weights' (--pretrained, or a model folder that holds them), else as the training "
                        "run validated, 0.875 after random resized crops, else 1 (the plain resize of training); "
                        "0.875 for a checkpoint without a recipe")
    p.add_argument("--img-size", type=int, nargs="+", metavar="PX",
                   help="evaluate at this size (H [W]): the spec at img_size, its position tables resampled "
                        "(vspec.resample). Default: the checkpoint's size")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def eval_rules() -> dict:
    """Each numeric flag's rule: the training configuration's field of that name (vspec/train/config.py), else a
    positive or finite number."""
    return {**field_rules(DataConfig), **field_rules(RunConfig, _EVAL_RUN), "batch_size": rule(Recipe, "batch_size"),
            "mean": MEAN, "std": STD, "crop_pct": CROP, "img_size": POSITIVE_INT}


def main(argv=None, prog: str = "eval.py") -> int:
    """0 and the result on stdout; 2 and one line on stderr for what cannot be done.

    Args:
        argv: the arguments (default: sys.argv[1:]).
        prog: the program's name in usage and error lines."""
    with one_line_warnings(prog):
        try:
            args = eval_parser(prog).parse_args(argv)
            check_flags(args, eval_rules(), prog)
            from ..train.evaluate import evaluate_checkpoint  # torch

            result = evaluate_checkpoint(args, prog)
        except SystemExit:  # --help, a usage error: argparse's own exit, before `errors()` imports anything
            raise
        except errors() as e:
            return report(e, prog)
    loss = result["metrics"]["loss"] if "task" in result else result["loss"]
    if not math.isfinite(loss):  # finite weights whose outputs overflow: no result to report
        print(f"{prog}: error: {printable(str(args.checkpoint))}: the loss is {loss}: the model's outputs are not "
              "finite", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
    elif "task" in result:
        shown = "  ".join(f"{k} {v:.4f}" for k, v in result["metrics"].items())
        print(f"{args.checkpoint}: {shown} on {result['samples']} samples ({result['task']})")
    else:
        print(f"{args.checkpoint}: top-1 {result['top1']:.2f} %  top-5 {result['top5']:.2f} %  "
              f"loss {result['loss']:.4f}  {result['images_per_s']:.1f} img/s on {result['images']} images "
              f"({result['data']}, {'x'.join(map(str, result['img_size']))} px, crop ratio {result['crop_ratio']})")
    return 0


def __getattr__(name: str):
    return moved(__name__, name)
