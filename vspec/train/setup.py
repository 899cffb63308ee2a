"""The setup of a training run (vspec/train/engine.py's `Training.setup`), as functions that return what they make,
in the order the run calls them: the final spec with the data it trains on (`spec_and_data`: the spec settled once,
before the task is made); the task (vspec/train/tasks/'s `make_task`); its loaders (`make_loaders`); the model and
its EMA (`make_model`); the precision (`run_precision`: said, before the model is made) and the optimizer and
schedule (`make_optimizer`); the loss (`make_loss`); the model the loop calls (`wrap_model`)."""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import attrs
import torch
from torch import nn

from ..compiler import build
from ..extras import needs
from ..ops import precision as cpu_precision
from ..spec import from_json
from ..weights.published import load_into
from . import distributed
from .checkpoints import CheckpointError
from .data.loader import build_loaders
from .data.prefetch import ahead
from .data.preprocess import inputs_line, resumed
from .data.splits import Splits
from .recipes import training_spec
from .tasks import task_type

__all__ = ["Loaders", "Loss", "Optimization", "make_loaders", "make_loss", "make_model", "make_optimizer",
           "resumed_config", "run_precision", "spec_and_data", "wrap_model"]


def resumed_config(cfg, ckpt=None):
    """`cfg` as a --resume runs it: with its checkpoint's inputs (`ckpt["inputs"]`), but for the flags given now.

    Args:
        cfg: the run's TrainConfig.
        ckpt: the checkpoint of a --resume, or None (`cfg` as it is)."""
    if ckpt is None or not ckpt.get("inputs"):
        return cfg
    return attrs.evolve(cfg, data=attrs.evolve(cfg.data, inputs=resumed(ckpt["inputs"], cfg.data.inputs)))


def spec_and_data(cfg, dist, device: torch.device, ckpt=None):
    """(the spec the run trains, its splits): the spec as the recipe trains it (`training_spec`), its splits read by
    its task's type (`Task.read`), then its num_classes set to the data set's; on --resume the checkpoint's spec
    (`checkpoints.check_resume` found it the same but for num_classes, which the data set decides).

    Args:
        cfg: the run's TrainConfig.
        dist: the run's processes (`Dist`).
        device: this process's device.
        ckpt: the checkpoint of a --resume, or None."""
    spec = training_spec(cfg.recipe, cfg.spec)
    if cfg.data.inputs and cfg.data.inputs.get("from") != "vspec's defaults" and dist.main:
        print(f"note: {inputs_line(cfg.data.inputs)}", file=sys.stderr)
    splits: Splits = task_type(spec).read(cfg, spec, dist, device, ckpt)
    if spec.num_classes != splits.num_classes:
        if dist.main:
            print(f"note: {cfg.data.name} has {splits.num_classes} classes; setting num_classes = "
                  f"{splits.num_classes}", file=sys.stderr)
        spec = attrs.evolve(spec, num_classes=splits.num_classes)
    return (spec if ckpt is None else from_json(ckpt["spec"])), splits


class Loaders(NamedTuple):
    """A run's loaders: the training and validation DataLoaders, the training batches as the loop reads them
    (fetched ahead: --prefetch), the batch of each process and the optimizer steps of an epoch."""

    train: Any
    val: Any
    source: Any
    local_batch: int
    steps_per_epoch: int


def make_loaders(splits: Splits, task, recipe, run, dist, device: torch.device, ckpt=None, last=None) -> Loaders:
    """The loaders of `splits` for the run (`RunConfig` `run`): the recipe's batch split over the processes and
    --accum-steps; a --resume's part-done epoch (`ckpt`, from the file `last`) must fit an epoch of them.

    Args:
        splits: what `spec_and_data` read.
        task: the run's task.
        recipe: the run's Recipe.
        run: the run's RunConfig.
        dist: the run's processes (`Dist`).
        device: this process's device.
        ckpt: the checkpoint of a --resume, or None.
        last: the path of that checkpoint (named in the error line)."""
    if recipe.batch_size % (dist.world * run.accum_steps):
        raise ValueError(f"--batch-size {recipe.batch_size} must be divisible by processes x accumulation steps "
                         f"({dist.world} x {run.accum_steps})")
    local_batch = recipe.batch_size // (dist.world * run.accum_steps)
    train_loader, val_loader = build_loaders(splits.train, splits.val, batch_size=local_batch,
                                             workers=distributed.workers_for(run.workers, device, dist.world),
                                             seed=run.seed, rank=dist.rank, world_size=dist.world,
                                             collate_fn=splits.collate)
    batches = len(train_loader)
    steps_per_epoch = batches // run.accum_steps
    if steps_per_epoch == 0:
        raise ValueError(f"--accum-steps {run.accum_steps} exceeds the {batches} batches of an epoch")
    if ckpt is not None and ckpt["batches_done"] > batches:
        raise CheckpointError(last, f"its 'batches_done' ({ckpt['batches_done']}) exceeds the {batches} batches of "
                                    "an epoch of this run")
    source = ahead(train_loader, device, run.prefetch,  # --prefetch
                   task.transfer if device.type == "cuda" else None, note=dist.main)
    return Loaders(train_loader, val_loader, source, local_batch, steps_per_epoch)


def make_model(spec, task, run, recipe, dist, device: torch.device, fresh: bool = True):
    """(the model, its EMA or None): the same initial weights on every rank; a `fresh` run's starting weights (the
    task's own, a text body's --init; --pretrained's published ones), the head's training outputs on, on the device
    (channels-last where asked, SyncBatchNorm over CUDA processes).

    Args:
        spec: the spec the run trains.
        task: the run's task.
        run: the run's RunConfig.
        recipe: the run's Recipe.
        dist: the run's processes (`Dist`).
        device: this process's device.
        fresh: a fresh run (not a --resume, whose weights come from its checkpoint)."""
    with needs("vspec's training"):
        from timm.utils import ModelEmaV3  # extra

    torch.manual_seed(run.seed)  # identical initial weights on every rank
    model = build(spec)
    if fresh:  # a fresh run: the task's own starting weights (a text body's --init)
        task.init_model(model)
    if run.pretrained is not None and fresh:  # a fresh run from published weights
        entry, new = load_into(model, *run.pretrained)
        if dist.main:
            print(f"note: --pretrained: {entry.source.where}" + (f"; fresh: {', '.join(new)}" if new else ""),
                  file=sys.stderr)
    model.set_training_outputs(True)  # the head's declared outputs (MixToken, maps) for head_loss
    model = model.to(device)
    if device.type == "cuda" and run.channels_last:
        model = model.to(memory_format=torch.channels_last)
    has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    if dist.world > 1 and device.type == "cuda" and has_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return model, (ModelEmaV3(model, decay=recipe.ema_decay) if recipe.ema_decay else None)


_ARITHMETIC = {"fp32": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast with a grad scaler"}


def _auto(device: torch.device) -> tuple[str, str]:
    """(what --precision auto picks on `device`, why): bf16 on CUDA and on a CPU that computes it natively
    (`vspec.ops.precision.native_bf16`), else fp32."""
    if device.type == "cuda":
        return "bf16", "CUDA"
    native = cpu_precision.native_bf16()
    return ("bf16", f"this CPU computes bf16 natively: {native}") if native else ("fp32", "no native bf16 on this CPU")


def run_precision(run, device: torch.device, ckpt=None) -> tuple[str, str]:
    """(the run's precision: fp32, bf16 or fp16; the line that says it and why). --precision auto picks bf16 on CUDA
    and on a CPU with native bf16 (AMX, AVX-512 BF16), fp32 elsewhere; a --resume keeps the precision its checkpoint
    records, whatever auto would pick now (another --precision was refused: `checkpoints.check_resume`).

    Args:
        run: the run's RunConfig.
        device: this process's device.
        ckpt: the checkpoint of a --resume, or None."""
    auto, reason = _auto(device)
    picked, why = (auto, f"auto: {reason}") if run.precision == "auto" else (run.precision,
                                                                              f"--precision {run.precision}")
    if run.precision == "bf16" and device.type == "cpu" and auto != "bf16":
        why += "; no native bf16 on this CPU: emulated, slower than fp32"
    kept = (ckpt or {}).get("precision")
    if kept is not None and run.precision == "auto":
        picked, why = kept, "the run's, from its checkpoint; " + (why if auto == kept else
                                                                  f"auto would pick {auto} here: {reason}")
    elif kept is not None:
        why += ", the run's, from its checkpoint"
    elif ckpt is not None:
        why += "; its checkpoint does not record the run's"
    return picked, f"precision: {_ARITHMETIC[picked]} ({why})"


class Optimization(NamedTuple):
    """The optimizer, its per-step schedule, the grad scaler (fp16's), the autocast dtype (None: fp32), whether
    AdamW's fused kernel runs and the precision (fp32, bf16 or fp16: `run_precision`'s)."""

    optimizer: Any
    scheduler: Any
    scaler: Any
    amp_dtype: Any
    fused: bool
    precision: str


def make_optimizer(model: nn.Module, recipe, run, device: torch.device, steps_per_epoch: int,
                   precision: str) -> Optimization:
    """AdamW (its fused kernel on CUDA and under fp16: --adamw), the per-step cosine (or linear) schedule with
    warmup, the precision's autocast dtype and fp16's grad scaler (TF32 matmuls on CUDA).

    Args:
        model: the model trained.
        recipe: the run's Recipe.
        run: the run's RunConfig.
        device: this process's device.
        steps_per_epoch: optimizer steps in an epoch (the schedule's unit).
        precision: fp32, bf16 or fp16 (`run_precision`'s)."""
    with needs("vspec's training"):
        from timm.optim import create_optimizer_v2  # extra
        from timm.scheduler import CosineLRScheduler, PolyLRScheduler  # extra

    # fp16's grad scaler skips the step after inf / NaN gradients inside the fused AdamW (its found_inf), where
    # with the unfused one it reads found_inf back to the host every step
    fused = run.adamw == "fused" or (run.adamw == "auto" and (device.type == "cuda" or precision == "fp16"))
    optimizer = create_optimizer_v2(model, "adamw", lr=recipe.lr, weight_decay=recipe.weight_decay,
                                    **({"fused": True} if fused else {}))
    total = recipe.epochs * steps_per_epoch
    warmup = round(recipe.warmup_frac * total) if recipe.warmup_frac else recipe.warmup_epochs * steps_per_epoch
    schedule = PolyLRScheduler if recipe.schedule == "linear" else CosineLRScheduler  # linear: power 1
    scheduler = schedule(optimizer, t_initial=total, lr_min=recipe.min_lr, warmup_t=warmup,
                         warmup_lr_init=recipe.warmup_lr, t_in_epochs=False,
                         **({"power": 1.0} if recipe.schedule == "linear" else {}))
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return Optimization(optimizer, scheduler, scaler, amp_dtype, fused, precision)


class Loss(NamedTuple):
    """The task's loss: the batch's mixing (mixup / cutmix, token labels' RelabelMix) or None, and the criterion."""

    mixup: Any
    criterion: Any


def make_loss(task, num_classes: int, spec, recipe, data, dist) -> Loss:
    """The task's loss for the data set's `num_classes`; a head with several outputs says what it trains on (rank 0).

    Args:
        task: the run's task.
        num_classes: the data set's classes.
        spec: the spec the run trains.
        recipe: the run's Recipe.
        data: the run's DataConfig.
        dist: the run's processes (`Dist`)."""
    mixup, criterion = task.loss(num_classes)
    if recipe.dense_avg_pool and data.token_labels is not None:
        raise ValueError("--dense-avg-pool: the pooled loss takes the image's target (the release fails on token "
                         "targets too); give --token-labels or --dense-avg-pool, not both")
    outputs = spec.head.outputs()  # what the head declares it returns in training (vspec/nn/head_outputs.py)
    if dist.main and len(outputs) > 1:
        if data.token_labels is not None:  # relabel_target's columns: the crop's, each token's
            label = {"sample": "the crop's pooled teacher scores", "tokens": "its token label at every token"}
        else:
            label = {"sample": "the label", "tokens": "the label at every token"}
        terms = " + ".join(f"{o.weight:g} x loss({o.name}, {label[o.target]})" for o in outputs)
        print(f"note: the {spec.head.kind} head trains on {len(outputs)} outputs: {terms}", file=sys.stderr)
    return Loss(mixup, criterion)


def wrap_model(model: nn.Module, run, dist, device: torch.device) -> nn.Module:
    """The model the loop calls: DDP over the processes (after the checkpoint's restore), compiled on request.

    Args:
        model: the model trained.
        run: the run's RunConfig.
        dist: the run's processes (`Dist`).
        device: this process's device."""
    if dist.world > 1:
        ids = [device.index] if device.type == "cuda" else None
        model = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    if run.compile:
        model = torch.compile(model)
    return model
