"""The training loop behind tools/train.py: one process, or one per device under torchrun (DDP).

Resumable to the step: the data order depends only on (seed, epoch), every RNG state is saved, and
`last.pt` is written atomically at the end of every epoch and when SIGTERM / SIGINT arrives (then
mid-epoch: the resumed run skips the samples already seen). `last.pt` is the truth after a kill at any
moment: at the end of an epoch it is written first, then `best.pt` (a copy) and `metrics.jsonl` (rewritten
from the history inside `last.pt`), and `--resume` rewrites both from it and removes the temporary files
of killed saves.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import attrs
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .. import spec as S
from ..checkpoint import with_checksum
from ..compiler import build
from ..nn.heads import head_loss
from . import checkpoints as C
from .data import build_datasets, build_loaders, build_transforms
from .progress import Progress
from .recipes import Recipe


@dataclass
class TrainConfig:
    spec: S.Model
    recipe: Recipe
    data: str = "digits"
    data_dir: str | None = None
    download: bool = False
    out: Path = Path("runs/train")
    resume: bool = False
    seed: int = 0
    workers: int = 0
    device: str = "auto"  # auto | cpu | cuda
    precision: str = "auto"  # auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16 | fp16 (the last two: autocast)
    compile: bool = False
    accum_steps: int = 1
    channels_last: bool = True
    synthetic_size: int = 1024
    max_steps: int | None = None  # stop after this many optimizer steps (benchmarks, smoke tests)
    log_every: int = 0  # progress lines when not on a TTY: every N steps (0: ~10 per epoch)
    overwrite: bool = False  # a fresh run may replace the files of an earlier run in `out`


class TrainingStopped(RuntimeError):
    """The loss turned non-finite: the run stops without saving, keeping the last good checkpoint."""


# ---------------------------------------------------------------- distributed setup
@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(device_kind: str) -> Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Dist()
    backend = "nccl" if device_kind == "cuda" else "gloo"
    dist.init_process_group(backend=backend)
    return Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def pick_device(cfg: TrainConfig, d: Dist) -> torch.device:
    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available")
    torch.cuda.set_device(d.local_rank)
    return torch.device("cuda", d.local_rank)


# ---------------------------------------------------------------- pieces from timm
def make_criterion(recipe: Recipe, num_classes: int):
    from timm.data import Mixup
    from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy

    if recipe.mixup > 0 or recipe.cutmix > 0:
        mixup = Mixup(mixup_alpha=recipe.mixup, cutmix_alpha=recipe.cutmix, label_smoothing=recipe.smoothing,
                      num_classes=num_classes)
        return mixup, SoftTargetCrossEntropy()
    if recipe.smoothing > 0:
        return None, LabelSmoothingCrossEntropy(smoothing=recipe.smoothing)
    return None, nn.CrossEntropyLoss()


@torch.no_grad()
def evaluate(model: nn.Module, loader, device, amp_ctx, d: Dist) -> dict[str, float]:
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=device)  # loss, top1, top5, count
    for images, target in loader:
        images, target = images.to(device, non_blocking=True), target.to(device, non_blocking=True)
        with amp_ctx():
            logits = model(images).float()
        k = min(5, logits.shape[1])
        top = logits.topk(k, dim=1).indices
        hits = top.eq(target[:, None])
        sums += torch.stack([F.cross_entropy(logits, target, reduction="sum").double(),
                             hits[:, :1].sum().double(), hits.sum().double(),
                             torch.tensor(float(len(target)), device=device, dtype=torch.float64)])
    if d.world > 1:
        dist.all_reduce(sums)
    loss, top1, top5, n = sums.tolist()
    return {"loss": loss / max(n, 1), "top1": 100 * top1 / max(n, 1), "top5": 100 * top5 / max(n, 1)}


# ---------------------------------------------------------------- signals
class StopFlag:
    """While active, SIGTERM / SIGINT set a flag (the loop checkpoints at the next step boundary and
    exits); the previous handlers come back on exit."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.signum: int | None = None
        self.previous = {}

    def __enter__(self):
        for sig in self.SIGNALS:
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame):
        self.signum = signum


# ---------------------------------------------------------------- the run
def run(cfg: TrainConfig) -> dict[str, Any]:
    """Train `cfg.spec`; returns the final metrics. Writes cfg.out / {last.pt, best.pt, metrics.jsonl,
    curves.png}."""
    r = cfg.recipe
    device_kind = "cuda" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()) else "cpu"
    d = init_distributed(device_kind)
    device = pick_device(cfg, d)
    out = Path(cfg.out)
    if cfg.resume and not (out / "last.pt").is_file():
        raise ValueError(f"--resume: no {out / 'last.pt'}")
    ckpt = C.load(out / "last.pt") if cfg.resume else None
    if ckpt is not None and ckpt.get("dropped"):
        raise ValueError(f"--resume: {out / 'last.pt'} comes from a release before spec format 2, and upgrading it "
                         "drops weights that could never learn (DAFF re-weighting a class token nothing reads), so "
                         "its optimizer state no longer fits: evaluate it or load it with vspec.load, but start a "
                         "new run to train")
    if ckpt is None:
        _check_fresh_folder(out, cfg.overwrite)
    if d.main:
        _prepare_folder(out, ckpt)
    C.seed_everything(cfg.seed + d.rank)
    spec = cfg.spec
    if spec.drop_path == 0.0 and r.drop_path > 0:
        spec = attrs.evolve(spec, drop_path=r.drop_path)
    if ckpt is not None:  # a resume goes on with the same spec and data, or not at all
        C.check_resume(ckpt, out / "last.pt", spec, C.data_args(cfg))
    if ckpt is not None and ckpt["batches_done"] == 0 and (
            ckpt["epoch"] >= r.epochs or (cfg.max_steps and ckpt["global_step"] >= cfg.max_steps)):
        if d.main:
            print(f"{out}: the run is finished ({ckpt['epoch']} epochs, {ckpt['global_step']} steps); nothing to "
                  "resume, summary.json is left as it was")
        _finish(d)
        return ckpt["metrics"][-1] if ckpt["metrics"] else {}
    train_tf = build_transforms(spec.img_size, spec.in_chans, train=True, auto_augment=r.auto_augment,
                                re_prob=r.re_prob, random_resized_crop=r.random_resized_crop)
    eval_tf = build_transforms(spec.img_size, spec.in_chans, train=False)
    train_ds, val_ds, num_classes = build_datasets(
        cfg.data, img_size=spec.img_size, in_chans=spec.in_chans, train_transform=train_tf, eval_transform=eval_tf,
        data_dir=cfg.data_dir, download=cfg.download, synthetic_size=cfg.synthetic_size,
        num_classes=spec.num_classes if cfg.data == "synthetic" else None,
        seed=cfg.seed)
    if spec.num_classes != num_classes:
        if d.main:
            print(f"note: {cfg.data} has {num_classes} classes; setting num_classes = {num_classes}", file=sys.stderr)
        spec = attrs.evolve(spec, num_classes=num_classes)
    if ckpt is not None:
        spec = S.from_json(ckpt["spec"])

    world_batch = r.batch_size
    if world_batch % (d.world * cfg.accum_steps):
        raise ValueError(f"--batch-size {world_batch} must be divisible by processes x accumulation steps "
                         f"({d.world} x {cfg.accum_steps})")
    local_batch = world_batch // (d.world * cfg.accum_steps)
    train_loader, val_loader = build_loaders(train_ds, val_ds, batch_size=local_batch, workers=cfg.workers,
                                             seed=cfg.seed, rank=d.rank, world_size=d.world)
    steps_per_epoch = len(train_loader) // cfg.accum_steps
    if steps_per_epoch == 0:
        raise ValueError(f"--accum-steps {cfg.accum_steps} exceeds the {len(train_loader)} batches of an epoch")
    if ckpt is not None and ckpt["batches_done"] > len(train_loader):
        raise C.CheckpointError(out / "last.pt", f"its 'batches_done' ({ckpt['batches_done']}) exceeds the "
                                                 f"{len(train_loader)} batches of an epoch of this run")

    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    model = build(spec).to(device)
    if device.type == "cuda" and cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    if d.world > 1 and device.type == "cuda" and has_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    core = model

    from timm.optim import create_optimizer_v2
    from timm.scheduler import CosineLRScheduler
    from timm.utils import ModelEmaV3

    optimizer = create_optimizer_v2(core, "adamw", lr=r.lr, weight_decay=r.weight_decay)
    total_steps = r.epochs * steps_per_epoch
    scheduler = CosineLRScheduler(optimizer, t_initial=total_steps, lr_min=r.min_lr,
                                  warmup_t=r.warmup_epochs * steps_per_epoch,
                                  warmup_lr_init=r.warmup_lr, t_in_epochs=False)
    ema = ModelEmaV3(core, decay=r.ema_decay) if r.ema_decay else None
    precision = cfg.precision if cfg.precision != "auto" else ("bf16" if device.type == "cuda" else "fp32")
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")

    def amp_ctx():
        return torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else nullcontext()

    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    mixup, criterion = make_criterion(r, num_classes)
    outputs = spec.head.outputs()  # what the head declares it returns in training (vspec/nn/heads.py)
    if d.main and len(outputs) > 1:
        label = {"image": "the image label", "tokens": "the image label at every token"}
        terms = " + ".join(f"{o.weight:g} x loss({o.name}, {label[o.target]})" for o in outputs)
        print(f"note: the {spec.head.kind} head trains on {len(outputs)} outputs: {terms}", file=sys.stderr)

    start_epoch, skip_batches, global_step, history, best, best_epoch = 0, 0, 0, [], -1.0, 0
    if ckpt is not None:
        C.restore(ckpt, out / "last.pt", core, optimizer, scheduler, scaler, ema)
        start_epoch, skip_batches = ckpt["epoch"], ckpt["batches_done"]
        global_step, history, best = ckpt["global_step"], ckpt["metrics"], ckpt["best_top1"]
        best_epoch = ckpt.get("best_epoch", 0)

    train_model = model
    if d.world > 1:
        ids = [device.index] if device.type == "cuda" else None
        train_model = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    if cfg.compile:
        train_model = torch.compile(train_model)

    writer = _tensorboard(out) if d.main else None

    def save(epoch: int, batches_done: int, epoch_loss: tuple[float, int] = (0.0, 0)) -> None:
        """last.pt; `epoch_loss` (sum, count) of a part-done epoch lets a resumed run average all of it."""
        if not d.main:
            return
        state = {"format": C.FORMAT, "spec": S.to_json(spec), "state_dict": core.state_dict(),
                 "ema": ema.module.state_dict() if ema is not None else None, "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "epoch": epoch,
                 "batches_done": batches_done, "global_step": global_step, "rng": C.rng_state(), "metrics": history,
                 "best_top1": best, "best_epoch": best_epoch, "epoch_loss": list(epoch_loss), "recipe": asdict(r),
                 "data": cfg.data, "data_args": C.data_args(cfg)}
        C.atomic_save(with_checksum(state), out / "last.pt")

    final: dict[str, Any] = {}
    with StopFlag() as stop:
        for epoch in range(start_epoch, r.epochs):
            train_model.train()
            skip = skip_batches if epoch == start_epoch else 0
            train_loader.sampler.set_epoch(epoch, skip=skip * local_batch)
            if skip and ckpt is not None:
                C.set_rng_state(ckpt["rng"])  # mid-epoch resume: continue the interrupted RNG streams
            else:
                C.seed_everything(cfg.seed * 100_003 + epoch * 1009 + d.rank)
                train_loader.generator.manual_seed(cfg.seed * 100_003 + epoch)
            progress = Progress(skip + len(train_loader), f"epoch {epoch + 1}/{r.epochs}", enabled=d.main,
                                every=cfg.log_every)
            t0, seen, loss_sum, loss_n = time.perf_counter(), 0, 0.0, 0
            if skip and ckpt is not None:
                loss_sum, loss_n = ckpt.get("epoch_loss", (0.0, 0))
            batches_done = skip
            for i, (images, target) in enumerate(train_loader, start=skip):
                images, target = images.to(device, non_blocking=True), target.to(device, non_blocking=True)
                if device.type == "cuda" and cfg.channels_last:
                    images = images.contiguous(memory_format=torch.channels_last)
                if mixup is not None:
                    images, target = mixup(images, target)
                last_micro = (i + 1) % cfg.accum_steps == 0
                sync = nullcontext() if last_micro or d.world == 1 else train_model.no_sync()
                with sync, amp_ctx():
                    loss = head_loss(criterion, train_model(images), target)  # the head's declared outputs
                scaler.scale(loss / cfg.accum_steps).backward()
                if last_micro:
                    if r.clip_grad:
                        scaler.unscale_(optimizer)
                        nn.utils.clip_grad_norm_(core.parameters(), r.clip_grad)
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad(set_to_none=True)
                    global_step += 1
                    scheduler.step_update(global_step)
                    if ema is not None:
                        ema.update(core, step=global_step)
                    C.kill_point("step")
                batches_done = i + 1
                seen += len(images) * d.world
                loss_value = loss.item()
                if not math.isfinite(loss_value):
                    kept = f"the last good checkpoint is {out / 'last.pt'}" if (out / "last.pt").is_file() else \
                        "no checkpoint was written"
                    step = global_step if last_micro else global_step + 1
                    raise TrainingStopped(f"the loss is {loss_value} at step {step} (epoch {epoch + 1}, "
                                          f"batch {i + 1}): stopped; {kept}")
                loss_sum, loss_n = loss_sum + loss_value, loss_n + 1
                lr = optimizer.param_groups[0]["lr"]
                progress.update(i + 1, loss=loss_sum / loss_n, lr=lr, ips=seen / (time.perf_counter() - t0))
                if stop.signum is not None or (cfg.max_steps and global_step >= cfg.max_steps):
                    break
            progress.close()
            elapsed = time.perf_counter() - t0
            if stop.signum is not None:
                save(epoch, batches_done, (loss_sum, loss_n))
                if d.main:
                    print(f"signal {stop.signum}: saved {out / 'last.pt'} at epoch {epoch + 1}, batch {batches_done}; "
                          "continue with --resume", file=sys.stderr)
                _finish(d)
                sys.exit(128 + stop.signum)
            val = evaluate(core, val_loader, device, amp_ctx, d)
            record = {"epoch": epoch + 1, "train_loss": loss_sum / max(loss_n, 1), "val_loss": val["loss"],
                      "val_top1": val["top1"], "val_top5": val["top5"], "lr": optimizer.param_groups[0]["lr"],
                      "images_per_s": seen / elapsed, "epoch_time_s": elapsed, "step": global_step}
            if ema is not None:
                record["ema_val_top1"] = evaluate(ema.module, val_loader, device, amp_ctx, d)["top1"]
            history.append(record)
            finished = cfg.max_steps and global_step >= cfg.max_steps
            improved = val["top1"] > best
            if improved:
                best, best_epoch = val["top1"], epoch + 1
            save(epoch + 1, 0)  # last.pt first: a kill after it loses nothing that --resume cannot rewrite
            if d.main:
                if improved:
                    C.atomic_copy(out / "last.pt", out / "best.pt")
                C.atomic_write_text(_jsonl(history), out / "metrics.jsonl")
                if writer is not None:
                    for k, v in record.items():
                        writer.add_scalar(k, v, epoch + 1)
                print(f"epoch {epoch + 1}: train_loss {record['train_loss']:.4f}  val_loss {val['loss']:.4f}  "
                      f"val_top1 {val['top1']:.2f}  val_top5 {val['top5']:.2f}  {record['images_per_s']:.1f} img/s",
                      file=sys.stderr)
            final = record
            if finished:
                break
    in_sync = _ranks_in_sync(core, d)
    if d.main and history:
        C.atomic_write_text(json.dumps({"final": final, "best_top1": best, "epochs": len(history),
                                        "world_size": d.world, "ranks_in_sync": in_sync}), out / "summary.json")
        _plot(history, out / "curves.png")
        print(f"done: {len(history)} epochs, val top-1 {final.get('val_top1', float('nan')):.2f} % "
              f"(best {best:.2f} %); checkpoint {out / 'last.pt'}, best {out / 'best.pt'}, "
              f"metrics {out / 'metrics.jsonl'}, curves {out / 'curves.png'}"
              + (f"; {d.world} processes, weights in sync: {in_sync}" if d.world > 1 else ""))
    if writer is not None:
        writer.close()
    _finish(d)
    return final


def _jsonl(history: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(record) + "\n" for record in history)


def _check_fresh_folder(out: Path, overwrite: bool) -> None:
    used = [name for name in C.RUN_FILES[:4] if (out / name).exists()]
    if used and not overwrite:
        raise ValueError(f"{out} holds an earlier run ({', '.join(used)}): continue it with --resume, or replace it "
                         "with --overwrite")


def _prepare_folder(out: Path, ckpt: dict[str, Any] | None) -> None:
    """Rank 0 before training: remove the temporary files of killed saves; a fresh run clears the files of
    an earlier one; a resumed run rewrites metrics.jsonl and best.pt from last.pt (a kill may have landed
    between their writes)."""
    out.mkdir(parents=True, exist_ok=True)
    C.clean_stale_temps(out)
    if ckpt is None:
        for name in C.RUN_FILES:
            (out / name).unlink(missing_ok=True)
        shutil.rmtree(out / "tb", ignore_errors=True)
        return
    C.atomic_write_text(_jsonl(ckpt["metrics"]), out / "metrics.jsonl")
    last, best = out / "last.pt", out / "best.pt"
    if ckpt["batches_done"] == 0 and ckpt.get("best_epoch") == ckpt["epoch"] and (
            not best.is_file() or best.stat().st_size != last.stat().st_size
            or best.stat().st_mtime_ns < last.stat().st_mtime_ns):
        C.atomic_copy(last, best)  # killed after last.pt, before its copy to best.pt


def _ranks_in_sync(model: nn.Module, d: Dist) -> bool:
    """Under DDP, whether every rank ends with the same weights (a float64 checksum per rank)."""
    if d.world == 1:
        return True
    with torch.no_grad():
        flat = torch.cat([p.detach().double().flatten() for p in model.parameters()])
        mine = torch.stack([flat.sum(), (flat * torch.arange(1, len(flat) + 1, dtype=torch.float64,
                                                                   device=flat.device)).sum()])
    sums = [torch.zeros_like(mine) for _ in range(d.world)]
    dist.all_gather(sums, mine)
    return all(torch.equal(sums[0], s) for s in sums[1:])


def _finish(d: Dist) -> None:
    if d.world > 1 and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _tensorboard(out: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # noqa: BLE001 - tensorboard is optional
        return None
    return SummaryWriter(out / "tb")


def _plot(history: list[dict[str, Any]], path: Path) -> None:
    from ..analysis import pyplot

    plt = pyplot()
    epochs = [h["epoch"] for h in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, [h["train_loss"] for h in history], label="train")
    ax_loss.plot(epochs, [h["val_loss"] for h in history], label="val")
    ax_loss.set(xlabel="epoch", ylabel="loss", title="loss")
    ax_acc.plot(epochs, [h["val_top1"] for h in history], label="val top-1")
    ax_acc.plot(epochs, [h["val_top5"] for h in history], label="val top-5")
    if any("ema_val_top1" in h for h in history):
        ax_acc.plot(epochs, [h.get("ema_val_top1", math.nan) for h in history], label="EMA val top-1")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
