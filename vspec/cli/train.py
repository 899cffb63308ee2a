"""`vspec train SPEC` and tools/train.py (the same command, the same arguments): train a spec on a CPU, one GPU,
or many under torchrun (vspec/train/engine.py). Every error is one line and exit code 2; 128 + N after signal N."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import attrs

from ..extras import missing_extra
from ..spec import SpecError, load_spec, override, parse_assignment
from ..train.config import DataConfig, RunConfig, TrainConfig
from ..train.datasets import help_text, names
from ..train.names import GLUE_TASKS
from ..train.recipes import RECIPES, resolve
from ..train.rules import FINITE, POSITIVE_FLOAT, ConfigError
from .common import OneLineParser, UsageError, one_line, one_line_warnings, pretrained_flag, spec_file

NAME, HELP = "train", "train a spec (tools/train.py's command: the same arguments)"


def data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", choices=names(), default="digits", help=help_text())
    p.add_argument("--data-dir", metavar="DIR", help="dataset folder (cifar*, imagefolder; glue: the task's TSVs)")
    p.add_argument("--task", choices=GLUE_TASKS, help="--data glue: the task")
    p.add_argument("--tokenizer", metavar="DIR|hf:ID",
                   help="text: a tokenizer folder (tokenizer.json, or a Hugging Face tokenizer's files), or hf:ID, a "
                        "Hub repository's tokenizer through Hugging Face's cache (HF_HUB_OFFLINE honoured); default: "
                        "with --pretrained, the weights' own tokenizer; else a WordPiece vocabulary trained on the "
                        "training texts, saved in OUT/tokenizer")
    p.add_argument("--max-len", type=int, metavar="N", help="text: truncate sequences to N tokens (default: the "
                                                           "spec's seq_len); batches are padded to their longest")
    p.add_argument("--download", action="store_true", help="download CIFAR into --data-dir when missing")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="data-loading processes (default: 0 on the CPU; on CUDA each process's share of the cores, "
                        "at most 8)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: cuda when available")
    p.add_argument("--synthetic-size", type=int, default=1024, metavar="N",
                   help="images in the synthetic training set (its validation set has N / 4)")
    p.add_argument("--seed", type=int, default=0, help="random seed (training, and the synthetic images)")
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
    p = OneLineParser(prog=prog, description="Train a vspec spec on a CPU, one GPU, or many under torchrun "
                      "(DDP). "
                "Writes OUT/last.pt (every epoch and on SIGTERM / SIGINT), OUT/best.pt, OUT/metrics.jsonl and "
                "OUT/curves.png.")
    p.add_argument("spec", metavar="SPEC", help="spec file (.py / .json / .toml), or a preset's name")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted spec override, repeatable (e.g. --set block.attention.heads=6)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="output folder")
    p.add_argument("--recipe", choices=tuple(RECIPES), default="none",
                   help="hyper-parameters: deit (DeiT ImageNet: SoT, Refiner, DHVT-ImageNet), dhvt_cifar, msf, glue "
                        "(fine-tuning a language body: lr 2e-5, batch 32, 10 %% warmup, linear decay, 3 epochs), "
                        "none (plain AdamW + cosine; default); the flags below override single fields")
    p.add_argument("--resume", action="store_true",
                   help="continue from OUT/last.pt (with the same spec and data flags: a run that differs is refused)")
    p.add_argument("--init", metavar="hf:DIR",
                   help="start a text body from a Hugging Face checkpoint folder's body weights (save_pretrained's "
                        "config.json + safetensors; no download); the spec's head starts fresh")
    pretrained_flag(p)
    p.add_argument("--save-format", choices=("pt", "folder"), default="pt",
                   help="pt (default): the .pt checkpoints only; folder: also the best and the final weights as "
                        "model folders OUT/best and OUT/final (config.json + model.safetensors; "
                        "vspec.from_pretrained reads them); the .pt checkpoints stay, for --resume")
    p.add_argument("--overwrite", action="store_true",
                   help="start afresh in an OUT that holds an earlier run, removing its files (without it such an "
                        "OUT is refused)")
    data_args(p)
    g = p.add_argument_group("recipe fields")
    g.add_argument("--epochs", type=int)
    g.add_argument("--batch-size", type=int, help="global batch (all processes and accumulation steps); "
                   "rescales the recipe's lr linearly unless --lr is given")
    g.add_argument("--lr", type=float, help="peak learning rate")
    g.add_argument("--weight-decay", type=float)
    g.add_argument("--warmup-epochs", type=int)
    g.add_argument("--min-lr", type=float)
    g.add_argument("--drop-path", type=float, help="stochastic depth (applied when the spec sets none)")
    g.add_argument("--mixup", type=float, help="mixup alpha (0: off)")
    g.add_argument("--cutmix", type=float, help="cutmix alpha (0: off)")
    g.add_argument("--smoothing", type=float, help="label smoothing")
    g.add_argument("--auto-augment", metavar="POLICY", help="timm policy, e.g. rand-m9-mstd0.5-inc1, or none")
    g.add_argument("--re-prob", type=float, help="random-erasing probability")
    g.add_argument("--ema-decay", type=float, help="EMA of weights (0: off)")
    g.add_argument("--clip-grad", type=float, help="gradient-norm clipping (0: off)")
    s = p.add_argument_group("execution")
    s.add_argument("--accum-steps", type=int, default=1, help="gradient accumulation steps")
    s.add_argument("--precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                   help="fp32, or mixed precision: bf16 / fp16 autocast (fp16 with a grad scaler), on the CPU too; "
                        "auto (default): bf16 on CUDA, fp32 on the CPU")
    s.add_argument("--normalise-on", choices=("auto", "host", "device"), default="auto",
                   help="images: normalised by the loader's workers (host) or, as uint8 batches, on the device "
                        "(timm's prefetcher; random erasing there too); auto (default): device on CUDA, host on "
                        "the CPU")
    s.add_argument("--decode-on", choices=("auto", "host", "device"), default="auto",
                   help="JPEG files (imagefolder, shards): decoded and augmented by the loader's workers (host: PIL "
                        "and timm's transforms) or on the device (nvJPEG and the same augmentations as tensor "
                        "operations; the workers only read the files); auto (default): device on CUDA")
    s.add_argument("--compile", action="store_true", help="torch.compile the model")
    s.add_argument("--max-steps", type=int, help="stop after N optimizer steps (smoke tests, benchmarks)")
    s.add_argument("--log-interval", type=float, default=30.0, metavar="SECONDS",
                   help="when the output is not a terminal (CI logs, redirected runs): a progress line every SECONDS "
                        "(default 30) and one at the end of each epoch; a terminal redraws one line in place")
    return p


def config_error(e, prog: str) -> UsageError:
    """A `ConfigError` of the configuration a command built from its flags, worded by the flag (`--epochs: ...`)."""
    flag = {"name": "data"}.get(e.field, e.field).replace("_", "-")
    return UsageError(f"{prog}: error: --{flag}: {e.message}")


def check_flags(args: argparse.Namespace, rules: dict, prog: str) -> None:
    """The flags that hold no configuration field (eval's, --mean, --std), each value by its rule (`Range`)."""
    for name, rule in rules.items():
        values = getattr(args, name)
        for value in values if isinstance(values, list) else [values]:  # a flag of several values: each
            try:
                if value is not None:  # not given
                    rule.check(name, value)
            except ConfigError as e:
                raise config_error(e, prog) from None


def config_from_args(args: argparse.Namespace, prog: str = "train.py"):
    """The `TrainConfig` of the flags: its classes check every value (the Python API's checks, worded by flag)."""
    try:
        fields = {k: getattr(args, k) for k in ("epochs", "batch_size", "lr", "weight_decay", "warmup_epochs",
                                                "min_lr", "drop_path", "mixup", "cutmix", "smoothing", "re_prob")}
        if args.auto_augment is not None:
            fields["auto_augment"] = None if args.auto_augment == "none" else args.auto_augment
        recipe = resolve(args.recipe, **fields)
        recipe = attrs.evolve(recipe, **{k: getattr(args, k) or None for k in ("ema_decay", "clip_grad")  # 0: off
                                         if getattr(args, k) is not None})
        run = RunConfig(out=args.out, resume=args.resume, overwrite=args.overwrite, seed=args.seed,
                        workers=args.workers, device=args.device, precision=args.precision,
                        normalise_on=args.normalise_on, decode_on=args.decode_on, compile=args.compile,
                        accum_steps=args.accum_steps,
                        max_steps=args.max_steps, log_interval=args.log_interval, save_format=args.save_format,
                        pretrained=(args.spec, args.pretrained) if args.pretrained else None, init=args.init)
        data = DataConfig(args.data, data_dir=args.data_dir, download=args.download,
                          synthetic_size=args.synthetic_size, task=args.task, tokenizer=args.tokenizer,
                          max_len=args.max_len)
    except ConfigError as e:
        raise config_error(e, prog) from None
    check_flags(args, {"mean": FINITE, "std": POSITIVE_FLOAT}, prog)
    spec = load_spec(spec_file(args.spec))
    if args.overrides:
        spec = override(spec, dict(parse_assignment(a) for a in args.overrides))
    if spec.embedder.text and (args.pretrained or (args.tokenizer or "").startswith("hf:")):
        from ..pretrained import tokenizer_path  # torch

        data = attrs.evolve(data, tokenizer=tokenizer_path(args.tokenizer, args.spec, args.pretrained))
    return TrainConfig(spec, recipe, attrs.evolve(data, inputs=_inputs(args, spec, prog)), run)


def _inputs(args: argparse.Namespace, spec, prog: str) -> dict | None:
    """The run's image inputs (`resolve_inputs`): the flags, else the published weights' preprocessing."""
    given = {k: getattr(args, k, None) for k in ("mean", "std", "interpolation")}
    if spec.embedder.text:
        flags = [f"--{k}" for k, v in given.items() if v is not None]
        if flags:
            raise UsageError(f"{prog}: error: {' / '.join(flags)}: for images (the spec's embedder is "
                             f"{spec.embedder.kind}, a text body)")
        return None
    from ..train.inputs import resolve_inputs  # torch

    weights = None
    if args.pretrained:
        from ..pretrained import pick  # torch

        name, _, tag, entry = pick(args.spec, args.pretrained)
        weights = {**entry.data_config(), "architecture": name, "tag": tag}
    return resolve_inputs(given, weights, spec.in_chans)


def errors() -> tuple[type[BaseException], ...]:
    """What a training or evaluation command reports as one line (exit code 2): a missing extra's module too
    (`missing_extra` words it)."""
    base = (SpecError, UsageError, ValueError, OSError, ImportError)
    try:
        from ..train.data import DataError  # torch
        from ..train.engine import TrainingStopped  # torch
    except ImportError:  # an extra missing: what is reported is that
        return base
    return (*base, DataError, TrainingStopped)


def report(e: BaseException, prog: str) -> int:
    """One line on stderr for what `errors()` catches; an ImportError that is no extra's is raised again."""
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
    checkpoint, a non-finite loss); 128 + N after signal N (SIGTERM, SIGINT), last.pt saved."""
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
