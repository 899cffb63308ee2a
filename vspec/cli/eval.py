"""`vspec eval CHECKPOINT` and tools/eval.py (the same command): evaluate a checkpoint or a model folder on the
validation split, top-1 / top-5 and images/s, or a text task's metrics."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from contextlib import nullcontext
from pathlib import Path

from ..spec import from_json
from ..train.config import DataConfig, RunConfig
from ..train.recipes import Recipe
from ..train.text import run_tokenizer
from ..train.validators import CROP, MEAN, POSITIVE_INT, STD, rule
from .common import OneLineParser, UsageError, one_line_warnings, pretrained_flag, printable
from .fields import field_rules
from .train import check_flags, data_args, errors, report

EVAL_RUN = ("seed", "workers", "device")  # the run's fields that evaluation takes too (flags of `data_args`)
NAME, HELP = "eval", "evaluate a checkpoint or a model folder (tools/eval.py's command: the same arguments)"


def eval_parser(prog: str = "eval.py") -> argparse.ArgumentParser:
    p = OneLineParser(prog=prog, description="Evaluate a checkpoint (from tools/train.py or vspec build --out) "
                "or a model folder (vspec.save_pretrained, --save-format folder): top-1 / top-5 and images/s on the "
                "validation split.")
    p.add_argument("checkpoint", type=Path, metavar="CHECKPOINT",
                   help="a checkpoint (.pt), a model folder, or with --pretrained a preset's name or .py file")
    pretrained_flag(p, "evaluate")
    data_args(p, EVAL_RUN)
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
    return {**field_rules(DataConfig), **field_rules(RunConfig, EVAL_RUN), "batch_size": rule(Recipe, "batch_size"),
            "mean": MEAN, "std": STD, "crop_pct": CROP, "img_size": POSITIVE_INT}


def main(argv=None, prog: str = "eval.py") -> int:
    """0 and the result on stdout; 2 and one line on stderr for what cannot be done."""
    with one_line_warnings(prog):
        try:
            args = eval_parser(prog).parse_args(argv)
            check_flags(args, eval_rules(), prog)
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


def evaluate_checkpoint(args: argparse.Namespace, prog: str = "eval.py") -> dict:
    import torch  # torch

    from ..compiler import build  # torch
    from ..train.data import build_datasets, build_loaders, build_transforms, eval_crop_ratio  # torch
    from ..train.distributed import Dist, workers_for  # torch
    from ..train.inputs import inputs_line, resolve_inputs  # torch
    from ..train.tasks import evaluate  # torch
    from ..weights.checkpoint import at_img_size, load_weights  # torch
    from ..weights.loading import load_checkpoint  # torch

    weights_cfg = None  # the published weights' data config, where the model holds them
    if args.pretrained:  # the published model, converted into vspec's cache: a model folder
        from ..weights.converted import pretrained_cfg  # torch
        from ..weights.published import published  # torch

        got = published(str(args.checkpoint), args.pretrained)
        args.checkpoint, entry = got.folder, got.entry
        weights_cfg = pretrained_cfg(got.name, got.tag, entry, got.preset, got.verified)
        if args.tokenizer is None and entry.tokenizer:
            args.tokenizer = f"hf:{entry.tokenizer}"
    if (args.tokenizer or "").startswith("hf:"):
        from ..weights.published import tokenizer_path  # torch

        args.tokenizer = tokenizer_path(args.tokenizer)
    ckpt = load_checkpoint(args.checkpoint)  # a .pt file or a model folder
    spec = from_json(ckpt["spec"])
    label = None
    if weights_cfg is None and not ckpt.get("pretrained_cfg") and ckpt.get("inputs"):
        label = "the training run's inputs"
    weights_cfg = weights_cfg or ckpt.get("pretrained_cfg") or ckpt.get("inputs")
    weights = ckpt.get("ema") if args.ema else ckpt["state_dict"]
    if weights is None:
        raise UsageError(f"{prog}: error: --ema: the checkpoint has no EMA weights")
    if args.img_size is not None and spec.embedder.text:
        raise UsageError(f"{prog}: error: --img-size: the checkpoint's model is a text body (it reads tokens, not "
                         "images)")
    if args.img_size is not None:  # the spec at that size (if it fits a batch), its position tables resampled
        spec, weights = at_img_size(spec, weights, _img_size(args.img_size, prog), args.checkpoint,
                                     batch=args.batch_size)
    model = build(spec)
    load_weights(model, weights, args.checkpoint, "EMA weights" if args.ema else "weights")
    device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
    model.to(device)
    if spec.embedder.text:
        from ..train.checkpoints import saved_tokenizer  # torch

        flags = [f"--{k}" for k in ("mean", "std", "interpolation") if getattr(args, k) is not None]
        if flags:
            raise UsageError(f"{prog}: error: {' / '.join(flags)}: for images (the checkpoint's model is a text "
                             "body)")

        return _evaluate_text(args, spec, model, device, saved_tokenizer(ckpt, args.checkpoint), prog)
    # the flags, else the published weights' preprocessing, else as the training run validated (vspec build
    # --out writes no recipe: timm's default crop)
    crop = eval_crop_ratio((ckpt.get("recipe") or {}).get("random_resized_crop", True))
    given = {"mean": args.mean, "std": args.std, "interpolation": args.interpolation, "crop_pct": args.crop_pct}
    inputs = resolve_inputs(given, weights_cfg, spec.in_chans, crop, label)
    if not args.json:
        print(f"{prog}: {inputs_line(inputs)}", flush=True)
    crop = inputs["crop_pct"]
    eval_tf = build_transforms(spec.img_size, spec.in_chans, train=False, crop_ratio=crop, mean=inputs["mean"],
                               std=inputs["std"], interpolation=inputs["interpolation"])
    _, val_ds, num_classes = build_datasets(args.data, img_size=spec.img_size, in_chans=spec.in_chans,
                                            train_transform=eval_tf, eval_transform=eval_tf, data_dir=args.data_dir,
                                            download=args.download, num_classes=spec.num_classes,
                                            synthetic_size=args.synthetic_size, seed=args.seed)
    if num_classes != spec.num_classes:
        raise UsageError(f"{prog}: error: {args.data} has {num_classes} classes, the checkpoint's model "
                         f"{spec.num_classes}")
    _, loader = build_loaders(val_ds, val_ds, batch_size=args.batch_size,
                              workers=workers_for(args.workers, device), drop_last=False)
    t0 = time.perf_counter()
    metrics = evaluate(model, loader, device, nullcontext, Dist())
    elapsed = time.perf_counter() - t0
    return {**metrics, "images": len(val_ds), "images_per_s": len(val_ds) / elapsed, "data": args.data,
            "crop_ratio": crop, "img_size": list(spec.img_size), "inputs": inputs}


def _img_size(sizes: list[int], prog: str) -> tuple[int, int]:
    if len(sizes) > 2:  # each is > 0 (eval_rules)
        raise UsageError(f"{prog}: error: --img-size takes H or H W, got {' '.join(map(str, sizes))}")
    return (sizes[0], sizes[-1])


def _evaluate_text(args: argparse.Namespace, spec, model, device, saved: dict[str, str] | None,
                   prog: str) -> dict:
    """A text checkpoint on its task's validation split, tokenised by --tokenizer or the run's OUT/tokenizer (the
    one the run was trained with, when the checkpoint identifies it: `saved`)."""
    from ..train.data import build_loaders  # torch
    from ..train.distributed import Dist, workers_for  # torch
    from ..train.tasks import evaluate_text  # torch
    from ..train.text.batches import pad_batch, text_datasets  # torch
    from ..train.text.tokenizer import tokenizer_mismatch  # torch

    tokenizer = args.tokenizer or run_tokenizer(args.checkpoint.parent)
    if not Path(tokenizer).is_dir():
        raise UsageError(f"{prog}: error: --tokenizer: {tokenizer} is no folder (the run's OUT/tokenizer, or the "
                         "tokenizer it was trained with)")
    problem = tokenizer_mismatch(saved, Path(tokenizer)) if saved is not None else None
    if problem:
        raise UsageError(f"{prog}: error: --tokenizer: {problem}")
    data = text_datasets(args.data, task=args.task, data_dir=args.data_dir, tokenizer=str(tokenizer),
                         max_len=args.max_len or spec.embedder.seq_len, vocab_size=spec.embedder.vocab_size,
                         out=args.checkpoint.parent)
    if data.num_classes != spec.num_classes:
        raise UsageError(f"{prog}: error: {data.task} has {data.num_classes} classes, the checkpoint's model "
                         f"{spec.num_classes}")
    _, loader = build_loaders(data.val, data.val, batch_size=args.batch_size,
                              workers=workers_for(args.workers, device), drop_last=False,
                              collate_fn=pad_batch(data.pad_id))
    metrics = evaluate_text(model, loader, device, nullcontext, Dist(), data.task)
    return {"task": data.task, "samples": len(data.val), "metrics": metrics}
