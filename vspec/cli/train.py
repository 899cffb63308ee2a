"""`vspec train SPEC` and tools/train.py (the same command, the same arguments): train a spec on a CPU, one GPU,
or many under torchrun (vspec/train/engine.py). Every error is one line and exit code 2; 128 + N after signal N."""

from __future__ import annotations

import argparse
import sys

import attrs

from ..extras import missing_extra
from ..spec import SpecError, load_spec, override, parse_assignment
from ..spec.catalogue import preset_ref
from ..train.config import DataConfig, RunConfig, TrainConfig
from ..train.recipes import RECIPES, Recipe, resolve
from ..train.validators import MEAN, STD, ConfigError
from .common import OneLineParser, UsageError, one_line, one_line_warnings, pretrained_flag
from .fields import add_fields, flags, given

__all__ = ["HELP", "NAME", "check_flags", "config_error", "config_from_args", "data_args", "errors", "main", "report",
           "train_parser"]

NAME, HELP = "train", "train a spec (tools/train.py's command: the same arguments)"


def data_args(p: argparse.ArgumentParser, run_fields=(), training: bool = False) -> None:
    """The data group (DataConfig's fields, those of training only with `training`, and RunConfig's `run_fields`:
    evaluation's seed, workers, device), then the inputs group.

    Args:
        p: the command's parser.
        run_fields: RunConfig's fields the command takes too.
        training: add the fields only training reads (vspec train)."""
    g = p.add_argument_group("data")
    add_fields(g, DataConfig, only=[f.name for f in attrs.fields(DataConfig)
                                    if training or not f.metadata.get("training_only")])
    add_fields(g, RunConfig, only=run_fields)
    g = p.add_argument_group("inputs", "how images are normalised and resized; default: the published weights' "
                                       "(--pretrained; eval: also those a model folder or checkpoint records, or "
                                       "the training run's), else vspec's defaults (ImageNet's mean / std for 3 "
                                       "channels, 0.5 for others; bicubic)")
    g.add_argument("--mean", type=float, nargs="+", metavar="M", help="per-channel mean of (x - mean) / std, x in "
                                                                      "[0, 1] (one value: every channel's)")
    g.add_argument("--std", type=float, nargs="+", metavar="S", help="per-channel std (> 0; one value: every "
                                                                     "channel's)")
    g.add_argument("--interpolation", choices=("bicubic", "bilinear", "nearest"), help="every resize's filter")


def train_parser(prog: str = "train.py") -> argparse.ArgumentParser:
    """SPEC, --set, --recipe and --pretrained by hand; the data, recipe and run groups from the configuration's
    fields (`add_fields`).

    Args:
        prog: the program's name in usage and error lines."""
    p = OneLineParser(prog=prog, description="Train a vspec spec on a CPU, one GPU, or many under torchrun "
                      "(DDP). "
                "Writes OUT/last.pt (every epoch and on SIGTERM / SIGINT), OUT/best.pt, OUT/metrics.jsonl and "
                "OUT/curves.png.")
    p.add_argument("spec", metavar="SPEC", help="spec file (.py / .json / .toml), or a preset's name")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted spec override, repeatable (e.g. --set block.attention.heads=6)")
    p.add_argument("--recipe", choices=tuple(RECIPES), default="none",
                   help="hyper-parameters: deit (DeiT ImageNet: SoT, Refiner, DHVT-ImageNet), dhvt_cifar, msf, glue "
                        "(fine-tuning a language body: lr 2e-5, batch 32, 10 %% warmup, linear decay, 3 epochs), "
                        "none (plain AdamW + cosine; default); the recipe fields' flags override single fields")
    pretrained_flag(p)
    data_args(p, training=True)
    add_fields(p.add_argument_group("recipe fields", "default: the --recipe's"), Recipe, unset=True)
    add_fields(p.add_argument_group("run", "how the run executes"), RunConfig)
    return p


def config_error(e, prog: str) -> UsageError:
    """A `ConfigError` of the configuration a command built from its flags, worded by the flag (`--epochs: ...`).

    Args:
        e: the ConfigError.
        prog: the program's name, first on the line."""
    flag = flags(Recipe, DataConfig, RunConfig).get(e.field) or "--" + e.field.replace("_", "-")
    return UsageError(f"{prog}: error: {flag}: {e.message}")


def check_flags(args: argparse.Namespace, rules: dict, prog: str) -> None:
    """The flags that hold no configuration field (eval's, --mean, --std), each value by its rule (`Range`).

    Args:
        args: the parsed command line.
        rules: dest -> its `Range` (`field_rules`, and the command's own).
        prog: the program's name, first on the error line."""
    for name, rule in rules.items():
        values = getattr(args, name)
        for value in values if isinstance(values, list) else [values]:  # a flag of several values: each
            try:
                if value is not None:  # not given
                    rule.check(name, value)
            except ConfigError as e:
                raise config_error(e, prog) from None


def config_from_args(args: argparse.Namespace, prog: str = "train.py"):
    """The `TrainConfig` of the flags: its classes check every value (the Python API's checks, worded by flag).

    Args:
        args: `train_parser`'s parsed arguments.
        prog: the program's name, first on an error line."""
    try:
        fields = given(Recipe, args)  # a recipe field's flag not given: the recipe's value; "off": None
        recipe = attrs.evolve(resolve(args.recipe, **fields), **{k: None for k, v in fields.items() if v is None})
        run = RunConfig(**given(RunConfig, args), pretrained=(args.spec, args.pretrained) if args.pretrained else None)
        data = DataConfig(**given(DataConfig, args))
    except ConfigError as e:
        raise config_error(e, prog) from None
    check_flags(args, {"mean": MEAN, "std": STD}, prog)
    spec = load_spec(args.spec)
    if args.overrides:
        spec = override(spec, dict(parse_assignment(a) for a in args.overrides))
    if spec.embedder.text and (args.pretrained or (args.tokenizer or "").startswith("hf:")):
        from ..weights.published import tokenizer_path  # torch

        data = attrs.evolve(data, tokenizer=tokenizer_path(args.tokenizer, args.spec, args.pretrained))
    return TrainConfig(spec, recipe, attrs.evolve(data, inputs=_inputs(args, spec, prog)), run)


def _inputs(args: argparse.Namespace, spec, prog: str) -> dict | None:
    """The run's image inputs (`resolve_inputs`): the flags, else the published weights' preprocessing (those of
    --pretrained, or of the tag a `name.tag` names)."""
    given = {k: getattr(args, k, None) for k in ("mean", "std", "interpolation")}
    if spec.embedder.text:
        flags = [f"--{k}" for k, v in given.items() if v is not None]
        if flags:
            raise UsageError(f"{prog}: error: {' / '.join(flags)}: for images (the spec's embedder is "
                             f"{spec.embedder.kind}, a text body)")
        return None
    from ..train.data.preprocess import resolve_inputs  # torch

    weights = None
    tagged = (preset_ref(args.spec) or (None, None))[1] is not None  # timm's name.tag: that tag's inputs, as its
    if args.pretrained or tagged:  # pretrained_cfg gives them to a model built from it, weights asked for or not
        from ..weights.published import pick  # torch

        name, _, tag, entry = pick(args.spec, args.pretrained or True)
        weights = {**entry.data_config(), "architecture": name, "tag": tag}
    return resolve_inputs(given, weights, spec.in_chans)


def errors() -> tuple[type[BaseException], ...]:
    """What a training or evaluation command reports as one line (exit code 2): a missing extra's module too
    (`missing_extra` words it)."""
    base = (SpecError, UsageError, ValueError, OSError, ImportError)
    try:
        from ..train.data.registry import DataError  # torch
        from ..train.engine import TrainingStopped  # torch
    except ImportError:  # an extra missing: what is reported is that
        return base
    return (*base, DataError, TrainingStopped)


def report(e: BaseException, prog: str) -> int:
    """One line on stderr for what `errors()` catches; an ImportError that is no extra's is raised again.

    Args:
        e: the exception.
        prog: the program's name, first on the line.

    Returns:
        2, the exit status."""
    if isinstance(e, ImportError):
        line = missing_extra(e)
        if line is None:
            raise e
        msg = f"{prog}: error: {line}"
    else:
        msg = one_line(e)
    print(msg if msg.startswith(f"{prog}:") else f"{prog}: error: {msg}", file=sys.stderr)
    return 2


def main(argv=None, prog: str = "train.py") -> int:
    """0 when the run ends; 2 and one line on stderr for what cannot be done (a bad flag, spec, data or
    checkpoint, a non-finite loss); 128 + N after signal N (SIGTERM, SIGINT), last.pt saved.

    Args:
        argv: the arguments (default: sys.argv[1:]).
        prog: the program's name in usage and error lines."""
    with one_line_warnings(prog):
        try:
            return _train(config_from_args(train_parser(prog).parse_args(argv), prog))
        except SystemExit:  # --help, a usage error: argparse's own exit, before `errors()` imports anything
            raise
        except errors() as e:
            return report(e, prog)


def _train(cfg) -> int:
    from ..train.engine import Interrupted, run  # torch

    try:
        run(cfg)
    except Interrupted as e:  # last.pt is saved: end as the signal would have ended the process
        if e.report:
            print(e, file=sys.stderr)
        return 128 + e.signum
    return 0
