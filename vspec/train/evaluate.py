"""Evaluation: a model's loss, top-1 / top-5 (`evaluate`) or a text task's metrics (`evaluate_text`) over a
validation split, summed over the processes; and a checkpoint or model folder evaluated as `vspec eval` does
(`evaluate_checkpoint`: vspec/cli/eval.py is its command line)."""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..compiler import build
from ..spec import from_json
from ..weights.checkpoint import at_img_size, load_weights
from ..weights.converted import pretrained_cfg
from ..weights.loading import load_checkpoint
from ..weights.published import published, tokenizer_path
from .checkpoints import saved_tokenizer
from .data.loader import build_loaders, to_device
from .data.preprocess import eval_crop_ratio, inputs_line, resolve_inputs
from .data.registry import options
from .data.sources import build_datasets
from .data.transforms import build_transforms
from .distributed import Dist, workers_for
from .step import forward
from .text import run_tokenizer
from .text.batches import pad_batch, text_datasets, token_types
from .text.metrics import text_metrics
from .text.readers import task_name
from .text.tokenizer import tokenizer_mismatch

__all__ = ["EvaluationError", "evaluate", "evaluate_checkpoint", "evaluate_text"]


class EvaluationError(ValueError):
    """What a checkpoint cannot be evaluated with (a flag that does not fit its model): one line, the program's
    name first."""


@torch.no_grad()
def evaluate(model: nn.Module, loader, device, amp_ctx, d, prepare=None) -> dict[str, float]:
    """Loss, top-1 and top-5 (%) over the whole split (summed over the processes, read back once); `prepare(images,
    train)` moves a batch to the device (and normalises it there: `DeviceNormalise`).

    Args:
        model: the model evaluated (put in eval mode).
        loader: the split's batches (images, targets).
        device: where the model is.
        amp_ctx: a callable returning the forward's autocast context (`nullcontext` for none).
        d: the run's processes (`Dist`).
        prepare: `prepare(images, train)` moves a batch to the device, or None (a plain copy)."""
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=device)  # loss, top1, top5, count
    for images, target in loader:
        images = images.to(device, non_blocking=True) if prepare is None else prepare(images, False)
        target = target.to(device, non_blocking=True)
        with amp_ctx():
            logits = forward(model, images).float()
        k = min(5, logits.shape[1])
        top = logits.topk(k, dim=1).indices
        hits = top.eq(target[:, None])
        sums[:3] += torch.stack([F.cross_entropy(logits, target, reduction="sum").double(),
                                 hits[:, :1].sum().double(), hits.sum().double()])
        sums[3] += len(target)  # a scalar: no tensor copied to the device (a synchronous copy) per batch
    if d.world > 1:
        dist.all_reduce(sums)
    loss, top1, top5, n = sums.tolist()
    return {"loss": loss / max(n, 1), "top1": 100 * top1 / max(n, 1), "top5": 100 * top5 / max(n, 1)}


@torch.no_grad()
def evaluate_text(model: nn.Module, loader, device, amp_ctx, d, task: str) -> dict[str, float]:
    """Loss (cross-entropy, or MSE for a regression) and the task's metrics over the whole split; the logits are
    read back to the host once, at the end.

    Args:
        model: the model evaluated (put in eval mode).
        loader: the split's padded batches.
        device: where the model is.
        amp_ctx: a callable returning the forward's autocast context (`nullcontext` for none).
        d: the run's processes (`Dist`).
        task: the task whose metrics are computed (a GLUE task's name or rt-polarity)."""
    model.eval()
    logits, targets = [], []
    for inputs, target in loader:
        with amp_ctx():
            logits.append(forward(model, to_device(inputs, device)).float())
        targets.append(target)
    logits = [torch.cat(logits).cpu()] if logits else []
    if d.world > 1:
        parts = [None] * d.world
        dist.all_gather_object(parts, (logits, targets))
        logits, targets = [x for p in parts for x in p[0]], [x for p in parts for x in p[1]]
    out, target = torch.cat(logits), torch.cat(targets)
    regression = out.shape[1] == 1 and target.is_floating_point()
    loss = F.mse_loss(out[:, 0], target) if regression else F.cross_entropy(out, target)
    return {"loss": float(loss), **text_metrics(task, out, target)}


def evaluate_checkpoint(args: argparse.Namespace, prog: str = "eval.py") -> dict:
    """A checkpoint or model folder on its data's validation split, as `vspec eval` does.

    Args:
        args: `vspec eval`'s parsed flags (`vspec.cli.eval.eval_parser`): the checkpoint, data, batch size, crop,
            mean / std / interpolation, --ema, --img-size, --pretrained.
        prog: the program's name, first in an `EvaluationError`'s line.

    Returns:
        An image model's loss, top1, top5, images, images_per_s, data, crop_ratio, img_size and inputs; a text
        body's task, samples and metrics.
    """
    ckpt, spec, model, weights_cfg, label = _model(args, prog)
    device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
    model.to(device)
    if spec.embedder.text:
        flags = [f"--{k}" for k in ("mean", "std", "interpolation") if getattr(args, k) is not None]
        if flags:
            raise EvaluationError(f"{prog}: error: {' / '.join(flags)}: for images (the checkpoint's model is a text "
                                  "body)")

        return _evaluate_text(args, spec, model, device, saved_tokenizer(ckpt, args.checkpoint), prog)
    return _evaluate_images(args, ckpt, spec, model, device, weights_cfg, label, prog)


def _model(args: argparse.Namespace, prog: str):
    """The checkpoint (with --pretrained, the published model's folder; an `hf:` tokenizer fetched) and its model
    with the weights evaluated (--ema: the EMA's; --img-size: resampled to that size): (ckpt, spec, model, the
    data config the weights carry or None, the label `resolve_inputs` gives a training run's inputs or None)."""
    weights_cfg = None  # the published weights' data config, where the model holds them
    if args.pretrained:  # the published model, converted into vspec's cache: a model folder
        got = published(str(args.checkpoint), args.pretrained)
        args.checkpoint, entry = got.folder, got.entry
        weights_cfg = pretrained_cfg(got.name, got.tag, entry, got.preset, got.verified)
        if args.tokenizer is None and entry.tokenizer:
            args.tokenizer = f"hf:{entry.tokenizer}"
    if (args.tokenizer or "").startswith("hf:"):
        args.tokenizer = tokenizer_path(args.tokenizer)
    ckpt = load_checkpoint(args.checkpoint)  # a .pt file or a model folder
    spec = from_json(ckpt["spec"])
    label = None
    if weights_cfg is None and not ckpt.get("pretrained_cfg") and ckpt.get("inputs"):
        label = "the training run's inputs"
    weights_cfg = weights_cfg or ckpt.get("pretrained_cfg") or ckpt.get("inputs")
    weights = ckpt.get("ema") if args.ema else ckpt["state_dict"]
    if weights is None:
        raise EvaluationError(f"{prog}: error: --ema: the checkpoint has no EMA weights")
    if args.img_size is not None and spec.embedder.text:
        raise EvaluationError(f"{prog}: error: --img-size: the checkpoint's model is a text body (it reads tokens, not "
                              "images)")
    if args.img_size is not None:  # the spec at that size (if it fits a batch), its position tables resampled
        spec, weights = at_img_size(spec, weights, _img_size(args.img_size, prog), args.checkpoint,
                                     batch=args.batch_size)
    model = build(spec)
    load_weights(model, weights, args.checkpoint, "EMA weights" if args.ema else "weights")
    return ckpt, spec, model, weights_cfg, label


def _evaluate_images(args: argparse.Namespace, ckpt: dict, spec, model, device, weights_cfg, label, prog: str) -> dict:
    """An image model on its data's validation split, preprocessed as the flags, else the published weights, else
    the training run say (its inputs line printed unless --json)."""
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
                                            synthetic_size=args.synthetic_size, seed=args.seed, **options(args))
    if num_classes != spec.num_classes:
        raise EvaluationError(f"{prog}: error: {args.data} has {num_classes} classes, the checkpoint's model "
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
        raise EvaluationError(f"{prog}: error: --img-size takes H or H W, got {' '.join(map(str, sizes))}")
    return (sizes[0], sizes[-1])


def _evaluate_text(args: argparse.Namespace, spec, model, device, saved: dict[str, str] | None,
                   prog: str) -> dict:
    """A text checkpoint on its task's validation split, tokenised by --tokenizer or the run's OUT/tokenizer (the
    one the run was trained with, when the checkpoint identifies it: `saved`)."""
    tokenizer = args.tokenizer or run_tokenizer(args.checkpoint.parent)
    if not Path(tokenizer).is_dir():
        raise EvaluationError(f"{prog}: error: --tokenizer: {tokenizer} is no folder (the run's OUT/tokenizer, or the "
                              "tokenizer it was trained with)")
    problem = tokenizer_mismatch(saved, Path(tokenizer)) if saved is not None else None
    if problem:
        raise EvaluationError(f"{prog}: error: --tokenizer: {problem}")
    data = text_datasets(args.data, task=args.task, data_dir=args.data_dir, tokenizer=str(tokenizer),
                         max_len=args.max_len or spec.embedder.seq_len, vocab_size=spec.embedder.vocab_size,
                         out=args.checkpoint.parent, **options(args))
    if data.num_classes != spec.num_classes:
        raise EvaluationError(f"{prog}: error: {task_name(data.task)} has {data.num_classes} classes, the "
                              f"checkpoint's model {spec.num_classes}")
    _, loader = build_loaders(data.val, data.val, batch_size=args.batch_size,
                              workers=workers_for(args.workers, device), drop_last=False,
                              collate_fn=pad_batch(data.pad_id, token_types(spec)))
    metrics = evaluate_text(model, loader, device, nullcontext, Dist(), data.task)
    return {"task": task_name(data.task), "samples": len(data.val), "metrics": metrics}
