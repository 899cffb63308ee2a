"""`vspec compare SPEC...`: train several specs on the same data, split, recipe and seeds (vspec/compare.py), then
tabulate and plot what each costs and how well it learned."""

from __future__ import annotations

import argparse
import math

from .. import compare as comparison
from ..compare import MAX_GRID
from ..fitting import MAX_CANDIDATES
from ..spec import SpecError
from ..spec.catalogue import spec_file
from ..spec.load import parse_value
from ..train.config import PRECISIONS
from ..train.data.registry import names, table
from ..train.recipes import RECIPES, Recipe, resolve
from .common import (
    UsageError,
    field_type,
    int_in,
    nonnegative_float,
    one_line,
    output_file,
    output_folder,
    printable,
    show,
)
from .fit import vary_items

__all__ = ["HELP", "NAME", "add_parser", "run"]

NAME = "compare"
HELP = ("train several specs (or a grid of one, or all at one MAC / parameter budget) on the same data, split, "
        "recipe and seeds; tabulate and plot params, MACs, samples/s and the metric, with whether each difference "
        "is distinguishable from the seed noise")


def _data_help() -> str:
    """--data's help, from the data sets' table (vspec/train/data/registry.py)."""
    sets = table().values()
    image = ", ".join(d.name for d in sets if d.modality == "image" and d.comparable)
    text = " or ".join(d.name for d in sets if d.modality == "text" and d.comparable)
    return (f"{image} (as tools/train.py; each spec's images resized to its img_size; default digits); for text "
            f"bodies {text} (glue with --task), one WordPiece tokenizer trained once into OUT/tokenizer for every run")


def _precisions(value: str) -> str:
    """--precision's values, comma-separated, each of vspec train's once."""
    items = value.split(",")
    if not set(items) <= set(PRECISIONS) or len(set(items)) < len(items):
        raise argparse.ArgumentTypeError(f"{show(value)}: expected one or more of {', '.join(PRECISIONS)}, "
                                         "comma-separated, each once")
    return value


def add_parser(sub) -> None:
    """Add `vspec compare`'s parser (its flags and help) to the command's subparsers.

    Args:
        sub: the `vspec` parser's subparsers action (`vspec.cli.parser`)."""
    c = sub.add_parser(NAME, help=HELP,
                       description="Train each SPEC on --data with the same fixed split, recipe and seeds (on the "
                                   "CPU, or --device cuda), then write OUT/compare.json (every number and run) and "
                                   "OUT/compare.png (the metric against MACs, min-max over the seeds as error bars, "
                                   "hollow within the noise of the best) and print a markdown table: params, MACs, "
                                   "samples/s (eval-mode forward, batch 64), the metric's mean, std and min-max over "
                                   "the seeds (the last epoch's: val top-1 for images, the task's headline metric "
                                   "for text), and Welch's t-test of the best spec against each other; the runs in "
                                   "OUT/runs/NAME-seedS. --grid expands each SPEC into a product of overrides; "
                                   "--match fits every SPEC to one budget first (vspec fit); --precision fp32,bf16 "
                                   "trains each in both.")
    c.add_argument("specs", nargs="+", metavar="SPEC", help="spec files (.py / .json / .toml), named by their stems")
    c.add_argument("--data", default="digits", metavar="NAME", help=_data_help())
    c.add_argument("--task", metavar="NAME", help="--data glue: the GLUE task (its headline metric is compared)")
    c.add_argument("--data-dir", metavar="DIR", help="the dataset's folder (cifar10, cifar100, imagefolder)")
    c.add_argument("--seeds", type=int_in(1, 100), default=3, metavar="N", help="runs per spec, 1 to 100 (default 3)")
    c.add_argument("--seed-base", type=int_in(0, 2**32 - 1, "2**32 - 1"), default=0, metavar="S",
                   help="the seeds are S, S+1, ..., S+N-1 (default 0)")
    c.add_argument("--recipe", choices=tuple(RECIPES), default=None,
                   help="tools/train.py's recipes (default for images compare: AdamW + cosine, no augmentation, 4 "
                        "epochs at batch 64, lr 4e-3; for text glue)")
    c.add_argument("--epochs", type=field_type(Recipe, "epochs"), metavar="N", help="default: the recipe's")
    c.add_argument("--batch-size", type=field_type(Recipe, "batch_size"), metavar="N", help="default: the recipe's")
    c.add_argument("--lr", type=field_type(Recipe, "lr"), metavar="LR", help="peak learning rate (default: the "
                                                                               "recipe's)")
    c.add_argument("--warmup-epochs", type=field_type(Recipe, "warmup_epochs"), metavar="N",
                   help="default: the recipe's")
    c.add_argument("--token-labels", metavar="DIR",
                   help="images: every SPEC trained twice, without and with these token-label maps (vspec label; "
                        "rows NAME and NAME+tl, a column says which); each needs the dense auxiliary head")
    c.add_argument("--threads", type=int_in(1, 1024), metavar="N", help="torch's CPU threads (default: torch's)")
    c.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the runs train (default cpu)")
    c.add_argument("--precision", type=_precisions, default="auto", metavar="P[,P...]",
                   help="the runs' precision, as vspec train's --precision takes it (default auto: bf16 on CUDA and on "
                        "a CPU that computes bf16 natively, else fp32); several, e.g. fp32,bf16: every SPEC trained "
                        "in each, rows NAME@P, so that the noise column says whether the precision changes the metric")
    c.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="repeatable, each KEY once: every SPEC becomes the cartesian product of these overrides, named "
                        "SPEC[KEY=V,...]")
    c.add_argument("--match", choices=("macs", "params"),
                   help="fit every SPEC but the first (or all, with --to) to the first's (--to's) MACs or parameters "
                        "before training (vspec fit over --vary); the table shows the original counts beside")
    c.add_argument("--to", metavar="SPEC", help="--match: the spec whose budget every SPEC is fitted to")
    c.add_argument("--vary", action="append", default=[], metavar="KEY[=VALUES]",
                   help="--match: the fields searched, as vspec fit takes them (default: dim, then depth)")
    c.add_argument("--tolerance", type=nonnegative_float, default=None, metavar="R",
                   help="--match: the largest relative deviation from the budget (default 0.02)")
    c.add_argument("--max-candidates", type=int_in(1), default=None, metavar="N",
                   help=f"refuse, before any spec is built, a --grid of more than N points (the SPECs x the "
                        f"combinations; default {MAX_GRID}, each trained --seeds times) and a --match search past N "
                        f"candidates (as vspec fit --max-candidates counts them; default {MAX_CANDIDATES:,})")
    c.add_argument("--out-dir", default="runs/compare", metavar="DIR", help="default runs/compare")
    c.add_argument("--overwrite", action="store_true", help="replace an earlier comparison in OUT (refused without)")


def run(args: argparse.Namespace) -> None:
    """Carry out `vspec compare` (called by `vspec.cli.main`; its errors become one line and exit 2).

    Args:
        args: the command line as `add_parser`'s parser parsed it."""
    from ..train.engine import Interrupted, TrainingStopped  # torch

    out = output_folder("--out-dir", args.out_dir)
    for name in comparison.FILES:
        output_file("--out-dir", out / name)
    if not args.overwrite and any((out / p).exists() for p in (*comparison.FILES, "runs", "tokenizer")):
        raise UsageError(f"vspec compare: error: --out-dir {printable(str(out))} holds an earlier comparison; "
                         "replace it with --overwrite")
    if args.seed_base + args.seeds > 2**32:
        raise UsageError(f"vspec compare: error: --seed-base {args.seed_base} + --seeds {args.seeds} passes 2**32")
    if args.threads is not None:
        import torch  # torch

        torch.set_num_threads(args.threads)

    args.recipe = args.recipe or ("glue" if args.data in names("text") else "compare")
    if (args.to or args.vary or args.tolerance is not None) and not args.match:
        raise UsageError("vspec compare: error: --to, --vary and --tolerance go with --match macs|params")
    args.tolerance = 0.02 if args.tolerance is None else args.tolerance
    grid = {}
    for item in args.grid:
        key, eq, values = item.partition("=")
        if not eq or not key or not values:
            raise UsageError(f"vspec compare: error: --grid {printable(item)}: expected KEY=V1,V2,...")
        if key in grid:
            raise UsageError(f"vspec compare: error: --grid {printable(key)}: given twice; give its values once "
                             f"({printable(key)}=V1,V2,...)")
        grid[key] = [parse_value(v) for v in values.split(",")]
        bad = next((v for v, p in zip(values.split(","), grid[key]) if isinstance(p, float) and not math.isfinite(p)),
                   None)
        if bad is not None:
            raise UsageError(f"vspec compare: error: --grid {printable(item)}: {show(bad)} is not a finite number")
    recipe = resolve(args.recipe, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                     warmup_epochs=args.warmup_epochs)
    seeds = range(args.seed_base, args.seed_base + args.seeds)
    try:
        result = comparison.compare(
            args.specs, data=args.data, data_dir=args.data_dir, task=args.task, seeds=seeds, recipe=recipe,
            recipe_name=args.recipe, out=out, command=comparison.command_line(args), grid=grid or None,
            match=args.match, to=spec_file(args.to) if args.to else None, vary=vary_items(args.vary) or None,
            tolerance=args.tolerance, device=args.device, say=comparison.say_err, max_candidates=args.max_candidates,
            token_labels=args.token_labels, precisions=args.precision.split(","))
    except SpecError:
        raise
    except (ValueError, TrainingStopped) as e:  # DataError, a duplicate name: before any training
        raise UsageError(f"vspec compare: error: {one_line(e)}") from None
    except Interrupted as e:
        raise KeyboardInterrupt from e
    print(comparison.table(result))
    print(f"{printable(str(out / 'compare.json'))}\n{printable(str(out / 'compare.png'))}")
