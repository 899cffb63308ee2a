"""The training loop behind tools/train.py: one process, or one per device under torchrun (DDP).

Resumable to the step: the data order depends only on (seed, epoch), a sample's augmentations only on (seed, epoch,
its index) (data/loader.py), every RNG state is saved, and `last.pt` is written atomically at the end of every epoch
and when SIGTERM / SIGINT arrives (then mid-epoch: the resumed run skips the samples already seen; signals.py: at
the next step boundary, or at once where the loop waits for data; the loader's workers leave the signal to this
process; during the end-of-run files, before the next: --resume writes the rest). `last.pt` is the truth after a kill
at any moment: at the end of an epoch it is written first, then `best.pt` (a copy) and `metrics.jsonl` (from the
history inside `last.pt`); `--resume` rewrites both from it and removes the temporary files of killed saves.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .._moved import moved as _moved
from ..nn.head_outputs import head_loss
from ..weights.folder import save_pretrained
from . import checkpoints, distributed, run_folder
from .data.loader import set_epoch
from .data.preprocess import run_pretrained_cfg
from .faults import kill_hook
from .files import atomic_copy, atomic_write_text
from .heap import kept_heap
from .progress import Progress
from .recipes import training_spec
from .setup import (
    make_loaders,
    make_loss,
    make_model,
    make_optimizer,
    resumed_config,
    run_precision,
    spec_and_data,
    wrap_model,
)
from .signals import Stop, StopFlag
from .step import forward
from .tasks import make_task, score_key, task_type

if TYPE_CHECKING:
    from .config import TrainConfig
    from .setup import Loaders, Loss, Optimization

__all__ = ["EpochStats", "Interrupted", "RunState", "Training", "TrainingStopped", "run"]


class TrainingStopped(RuntimeError):
    """The loss turned non-finite: the run stops without saving, keeping the last good checkpoint."""


# ---------------------------------------------------------------- the run
class Interrupted(Exception):
    """SIGTERM / SIGINT arrived: last.pt holds the part-done epoch (continue with --resume). The command
    line reports `str(self)` (on rank 0, `report`) and ends with exit code 128 + `signum`, as a process
    the signal had ended."""

    def __init__(self, signum: int, message: str, report: bool = True):
        super().__init__(message)
        self.signum, self.report = signum, report


def run(cfg: TrainConfig) -> dict[str, Any]:
    """Train `cfg.spec`; returns the final metrics. Writes cfg.run.out / {last.pt, best.pt, metrics.jsonl,
    curves.png}. Raises TrainingStopped (non-finite loss), Interrupted (SIGTERM / SIGINT, after saving
    last.pt), ValueError / CheckpointError / DataError (what was asked cannot be done).

    Args:
        cfg: the run: its spec, recipe, data set (`DataConfig`) and execution (`RunConfig`)."""
    t = Training(cfg)
    with kept_heap(t.device):  # a CPU run's freed activations reused, not faulted in again every step
        if not t.setup():
            return t.ckpt["metrics"][-1] if t.ckpt["metrics"] else {}
        return t.train()


@dataclass
class EpochStats:
    """The running totals of one epoch: its mean loss so far, images seen, batches done."""

    t0: float
    loss_sum: float = 0.0
    loss_n: int = 0
    seen: int = 0
    batches_done: int = 0

    @property
    def elapsed(self) -> float:
        """Seconds since the epoch started."""
        return time.perf_counter() - self.t0


@dataclass
class RunState:
    """Where the run stands, what changes as it goes: the epoch it starts at and the batches of that epoch already
    trained (a mid-epoch resume's), the optimizer steps taken, the epochs' records, the best score and its epoch
    (what last.pt keeps of them, --resume restores), and the dense head's loss scale of the epoch
    (--annealing-weight)."""

    start_epoch: int = 0
    skip_batches: int = 0
    global_step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    best: float = -1.0
    best_epoch: int = 0
    dense_scale: float = 1.0


class Training:
    """One run of `run`. Its public steps: `setup` (the run made ready), `train` (the epochs), and within them
    `batches` (an epoch's training batches ready on the device) and `train_step` (one batch's forward and backward,
    an optimizer step every accum_steps batches); the benchmarks drive a run through these. What `setup` makes is
    kept as its functions (vspec/train/setup.py) return it: `spec`, `task`, `loaders`, `model` (what is saved and
    evaluated) and its `ema`, `optim` (with the precision; `precision_line` says it and why), `loss`, `train_model`
    (the model the loop calls: DDP, compiled); where the run stands is `state`. The other methods are `setup`'s and
    `train`'s parts."""

    spec: Any
    task: Any
    loaders: Loaders
    model: nn.Module
    ema: Any
    optim: Optimization
    precision_line: str
    loss: Loss
    train_model: nn.Module

    def __init__(self, cfg: TrainConfig):
        self.cfg, self.recipe = cfg, cfg.recipe
        cuda = cfg.run.device == "cuda" or (cfg.run.device == "auto" and torch.cuda.is_available())
        self.dist = distributed.init_distributed("cuda" if cuda else "cpu")
        self.device = distributed.pick_device(cfg.run, self.dist)
        self.loss_every = cfg.run.loss_every or (32 if self.device.type == "cuda" else 1)
        self.out = Path(cfg.run.out)
        self.last = self.out / "last.pt"
        self.ckpt: dict[str, Any] | None = None
        self.state = RunState()
        self.step_hook = kill_hook("step")  # None unless a crash test asks for it

    def setup(self, model: bool = True) -> bool:
        """The run made ready, in this order: --resume's checkpoint checked (or the fresh folder), the final spec
        and its data, the task and loaders; then (`model`) the model, optimizer and loss, the checkpoint's states
        restored, the model wrapped (DDP, compile). Returns False where --resume found the run finished (nothing to
        train: its missing end-of-run files written). `model=False` stops after the loaders (a data benchmark's)."""
        cfg, recipe, dist, device = self.cfg, self.recipe, self.dist, self.device
        self.resolve_resume()  # last.pt read and checked (--resume) or the folder found free; seeded
        if self.finished_before():
            return False
        # the functions of vspec/train/setup.py (and make_task), each returning what it makes
        precision, self.precision_line = run_precision(cfg.run, device, self.ckpt)  # `train` says it first
        cfg = self.cfg = resumed_config(cfg, self.ckpt)  # a resumed run keeps its inputs, but for the flags
        self.spec, splits = spec_and_data(cfg, dist, device, self.ckpt)  # the spec settled once, then its data
        self.task = make_task(cfg, self.spec, splits, dist, device, self.ckpt)  # image or text, holding that spec
        self.loaders = make_loaders(splits, self.task, recipe, cfg.run, dist, device, self.ckpt, self.last)
        if model:
            # the model from the settled spec, before the optimizer that holds its parameters
            self.model, self.ema = make_model(self.spec, self.task, cfg.run, recipe, dist, device,
                                              fresh=self.ckpt is None)
            # its schedule needs the loaders' steps per epoch
            self.optim = make_optimizer(self.model, recipe, cfg.run, device, self.loaders.steps_per_epoch, precision)
            # the task's criterion for the data set's num_classes
            self.loss = make_loss(self.task, splits.num_classes, self.spec, recipe, cfg.data, dist)
            self.restore()  # after the optimizer (its state) and before DDP (which broadcasts rank 0's weights)
            self.train_model = wrap_model(self.model, cfg.run, dist, device)
        return True

    def batches(self, epoch: int = 0, ahead: bool = True):
        """Epoch `epoch`'s training batches ready on the device, (inputs, target), from where a mid-epoch resume left
        off: its data order and RNG streams set first (`start_epoch_data`). `ahead`: through the prefetcher
        (--prefetch), as the loop reads them; False: straight from the loader."""
        skip = self.start_epoch_data(epoch)
        return self.task.batches(self.loaders.source if ahead else self.loaders.train, True, epoch, skip)

    # ------------------------------------------------ before training
    def resolve_resume(self) -> None:
        """--resume: load last.pt and check that it continues this run; a fresh run: check that `out` may be
        used. Then prepare the folder (rank 0) and seed."""
        cfg, dist, last = self.cfg, self.dist, self.last
        if cfg.run.resume and not last.is_file():
            raise ValueError(f"--resume: no {last}")
        self.ckpt = ckpt = checkpoints.load(last, task_type) if cfg.run.resume else None
        if ckpt is not None and ckpt.get("dropped"):
            raise ValueError(f"--resume: {last} comes from a release before spec format 2, and upgrading it "
                             "drops weights that could never learn (DAFF re-weighting a class token nothing reads), "
                             "so its optimizer state no longer fits: evaluate it or load it with vspec.load, but "
                             "start a new run to train")
        if ckpt is None:
            run_folder.check_fresh(self.out, cfg.run.overwrite)
        if dist.main:
            run_folder.prepare(self.out, ckpt)
            if ckpt is not None and cfg.run.save_format == "folder":
                run_folder.refresh_best_folder(self.out)
        checkpoints.seed_everything(cfg.run.seed + dist.rank)
        if ckpt is not None:  # a resume goes on with the same spec and data, or not at all
            checkpoints.check_resume(ckpt, last, training_spec(self.recipe, cfg.spec), checkpoints.data_args(cfg),
                                     cfg.run.precision)

    def finished_before(self) -> bool:
        """Whether --resume found a run that is already finished (said on rank 0, which writes the end-of-run files a
        kill or a signal left out; nothing more to do)."""
        ckpt, max_steps = self.ckpt, self.cfg.run.max_steps
        if ckpt is None or ckpt["batches_done"] != 0 or not (
                ckpt["epoch"] >= self.recipe.epochs or (max_steps and ckpt["global_step"] >= max_steps)):
            return False
        if self.dist.main:  # the end-of-run files a kill or a signal left unwritten, written from last.pt
            data = self.cfg.data
            left = run_folder.complete(self.out, ckpt, lambda: score_key(self.cfg.spec, data.task or data.name, ckpt),
                                       self.dist.world, self.cfg.run.save_format == "folder")
            print(f"{self.out}: the run is finished ({ckpt['epoch']} epochs, {ckpt['global_step']} steps); "
                  + (f"wrote its missing {', '.join(left)}" if left else "nothing to resume, summary.json is left as "
                     "it was"))
        distributed.finish(self.dist)
        return True

    def amp_ctx(self):
        """The autocast context of a forward (the recipe's AMP dtype), or a null context without AMP."""
        amp_dtype = self.optim.amp_dtype
        return torch.autocast(self.device.type, dtype=amp_dtype) if amp_dtype else nullcontext()

    def restore(self) -> None:
        """--resume: weights, optimizer, schedule, scaler, EMA and the counters from last.pt."""
        ckpt = self.ckpt
        if ckpt is None:
            return
        o = self.optim
        checkpoints.restore(ckpt, self.last, self.model, o.optimizer, o.scheduler, o.scaler, self.ema)
        checkpoints.adamw_kernel(o.optimizer, o.fused)  # this run's, whichever the checkpoint's run used
        self.state = RunState(start_epoch=ckpt["epoch"], skip_batches=ckpt["batches_done"],
                              global_step=ckpt["global_step"], history=ckpt["metrics"], best=ckpt["best_score"],
                              best_epoch=ckpt.get("best_epoch", 0))

    # ------------------------------------------------ training
    def train(self) -> dict[str, Any]:
        """The epochs, each trained, evaluated and checkpointed; then the summary. Returns the last record."""
        recipe, epochs, warmup = self.recipe, self.recipe.epochs, self.recipe.warmup_epochs
        if self.dist.main:  # (after every refusal) the precision and why: auto's depends on the CPU
            print(self.precision_line, file=sys.stderr)
        if self.dist.main and not recipe.warmup_frac and warmup > epochs:  # (after every refusal)
            print(f"note: {epochs} epoch{'s' * (epochs != 1)} < the recipe's {warmup} warmup epochs: the lr rises for "
                  f"the whole run, to about {epochs / warmup:.0%} of its peak {recipe.lr:.3g}, and never decays; "
                  "--warmup-epochs sets a shorter warmup", file=sys.stderr)
        self.writer = run_folder.tensorboard(self.out) if self.dist.main else None
        final: dict[str, Any] = {}
        with StopFlag(prompt=self.dist.world == 1) as stop:
            for epoch in range(self.state.start_epoch, self.recipe.epochs):
                stats = self.train_epoch(epoch, stop)
                if stop.signum is not None:
                    self.interrupt(epoch, stats, stop.signum)
                try:
                    final = self.evaluate_epoch(epoch, stats, stop)
                except Stop:  # the epoch is trained, not evaluated: --resume evaluates it
                    self.interrupt(epoch, stats, stop.signum)
                self.end_epoch(epoch, final)
                if self.steps_done():
                    break
            self.summarize(final, stop)
        return final

    def steps_done(self) -> bool:
        """Whether --max-steps is reached."""
        return bool(self.cfg.run.max_steps and self.state.global_step >= self.cfg.run.max_steps)

    def train_epoch(self, epoch: int, stop: StopFlag) -> EpochStats:
        """One epoch (or its rest, after a mid-epoch resume), until its end, a signal or --max-steps."""
        skip = self.start_epoch_data(epoch)
        progress = Progress(skip + len(self.loaders.train), f"epoch {epoch + 1}/{self.recipe.epochs}",
                            enabled=self.dist.main,
                            interval=self.cfg.run.log_interval or math.inf, unit=self.task.unit)
        stats = EpochStats(time.perf_counter(), batches_done=skip)
        if skip and self.ckpt is not None:
            stats.loss_sum, stats.loss_n = self.ckpt.get("epoch_loss", (0.0, 0))
        self.train_model.train()
        pending: list[tuple[int, int, torch.Tensor]] = []  # (batch, step, loss) not yet read on the host

        def read_losses() -> None:  # one host sync for the pending losses: checked, summed, shown
            values = torch.stack([loss for _, _, loss in pending]).tolist() if pending else []
            for (i, step, _), value in zip(pending, values):
                self.check_finite(value, epoch, i, step)
                stats.loss_sum, stats.loss_n = stats.loss_sum + value, stats.loss_n + 1
            if pending:
                progress.update(pending[-1][0] + 1, loss=stats.loss_sum / stats.loss_n,
                                lr=self.optim.optimizer.param_groups[0]["lr"], ips=stats.seen / stats.elapsed)
            pending.clear()

        loader = stop.batches(self.loaders.source)
        with suppress(Stop):  # a signal while the loop waited for batch `stats.batches_done`: it stops at that boundary
            for i, (images, target) in enumerate(self.task.batches(loader, True, epoch, skip), start=skip):
                loss, stepped = self.train_step(i, images, target)
                pending.append((i, self.state.global_step if stepped else self.state.global_step + 1, loss))
                stats.batches_done = i + 1
                stats.seen += len(target) * self.dist.world
                done = stop.signum is not None or self.steps_done()
                if done or len(pending) >= self.loss_every:
                    read_losses()
                if done:
                    break
        read_losses()
        progress.close()
        return stats

    def start_epoch_data(self, epoch: int) -> int:
        """The epoch's data order and RNG streams (those of the interrupted epoch after a mid-epoch resume), the
        dense head's loss scale (--annealing-weight: the mean lr at the epoch's first step / the peak lr); returns
        the batches to skip."""
        skip = self.state.skip_batches if epoch == self.state.start_epoch else 0
        if self.recipe.annealing_weight:  # from the schedule: a run resumed mid-epoch scales as the uninterrupted one
            lrs = self.optim.scheduler._get_lr(epoch * self.loaders.steps_per_epoch)
            self.state.dense_scale = sum(lrs) / len(lrs) / self.recipe.lr
        set_epoch(self.loaders.train, epoch, skip=skip * self.loaders.local_batch)
        if skip and self.ckpt is not None:
            checkpoints.set_rng_state(self.ckpt["rng"])  # mid-epoch resume: continue the interrupted RNG streams
        else:
            checkpoints.seed_everything(self.cfg.run.seed * 100_003 + epoch * 1009 + self.dist.rank)
            self.loaders.train.generator.manual_seed(self.cfg.run.seed * 100_003 + epoch)
        return skip

    def train_step(self, i: int, images: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """Forward and backward of batch `i` (ready on the device: `task.batches`); an optimizer step after every
        `accum_steps` batches (gradients all-reduced only then). Returns the batch's loss (a tensor on the device:
        reading it is a host sync, which `train_epoch` does once per `loss_every` batches) and whether a step was
        taken."""
        cfg, state, (optimizer, scheduler, scaler, *_) = self.cfg, self.state, self.optim
        if self.loss.mixup is not None:
            images, target = self.loss.mixup(images, target)
        last_micro = (i + 1) % cfg.run.accum_steps == 0
        sync = nullcontext() if last_micro or self.dist.world == 1 else self.train_model.no_sync()
        with sync, self.amp_ctx():
            loss = head_loss(self.loss.criterion, forward(self.train_model, images), target,  # the head's outputs
                             n_comn=self.recipe.cos_reg_component or None, pooled=self.recipe.dense_avg_pool,
                             dense_scale=state.dense_scale)
        scaler.scale(loss / cfg.run.accum_steps).backward()
        if last_micro:
            if self.recipe.clip_grad:
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(self.model.parameters(), self.recipe.clip_grad)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            state.global_step += 1
            scheduler.step_update(state.global_step)
            if self.ema is not None:
                self.ema.update(self.model, step=state.global_step)
            if self.step_hook is not None:  # the crash tests' (VSPEC_TEST_KILL_AT=step:N)
                self.step_hook()
        return loss.detach(), last_micro

    def check_finite(self, loss_value: float, epoch: int, i: int, step: int) -> None:
        """Stop the run with TrainingStopped (one line naming the step and the last good checkpoint) when the
        loss is not finite.

        Args:
            loss_value: the step's loss.
            epoch: the epoch, from 0.
            i: the batch's index in the epoch, from 0.
            step: the optimizer step."""
        if math.isfinite(loss_value):
            return
        kept = f"the last good checkpoint is {self.last}" if self.last.is_file() else "no checkpoint was written"
        raise TrainingStopped(f"the loss is {loss_value} at step {step} (epoch {epoch + 1}, batch {i + 1}): stopped; "
                              f"{kept}")

    def interrupt(self, epoch: int, stats: EpochStats, signum: int):
        """A signal arrived: save the part-done epoch to last.pt and stop with Interrupted."""
        self.save(epoch, stats.batches_done, (stats.loss_sum, stats.loss_n))
        distributed.finish(self.dist)
        raise Interrupted(signum, f"signal {signum}: saved {self.last} at epoch {epoch + 1}, batch "
                                  f"{stats.batches_done}; continue with --resume", report=self.dist.main)

    def evaluate_epoch(self, epoch: int, stats: EpochStats, stop: StopFlag) -> dict[str, Any]:
        """The epoch's record: training loss and speed, and the task's validation metrics (`Stop` after a
        signal)."""
        elapsed = stats.elapsed
        val = self.task.evaluate(self.model, self.ema, stop.batches(self.loaders.val), self.device, self.amp_ctx)
        return self.task.record(epoch + 1, stats.loss_sum / max(stats.loss_n, 1), val,
                                self.optim.optimizer.param_groups[0]["lr"], stats.seen / elapsed, elapsed,
                                self.state.global_step)

    def end_epoch(self, epoch: int, record: dict[str, Any]) -> None:
        """last.pt first (a kill after it loses nothing that --resume cannot rewrite), then best.pt,
        metrics.jsonl, TensorBoard and the epoch's line (rank 0)."""
        state = self.state
        state.history.append(record)
        improved = record[self.score_key] > state.best
        if improved:
            state.best, state.best_epoch = record[self.score_key], epoch + 1
        self.save(epoch + 1, 0)
        if not self.dist.main:
            return
        if improved:
            atomic_copy(self.last, self.out / "best.pt")
            self.export("best")
        atomic_write_text(run_folder.jsonl(state.history), self.out / "metrics.jsonl")
        if self.writer is not None:
            for k, v in record.items():
                self.writer.add_scalar(k, v, epoch + 1)
        print(self.task.line(record), file=sys.stderr)

    @property
    def score_key(self) -> str:
        """The record's entry the best checkpoint is chosen by: top-1, or a text task's headline metric."""
        return self.task.score_key

    def save(self, epoch: int, batches_done: int, epoch_loss: tuple[float, int] = (0.0, 0)) -> None:
        """last.pt (rank 0); `epoch_loss` (sum, count) of a part-done epoch lets a resumed run average all of it."""
        if self.dist.main:
            o, state = self.optim, self.state
            checkpoints.save(self.last, spec=self.spec, task=self.task, model=self.model, ema=self.ema,
                             optimizer=o.optimizer, scheduler=o.scheduler, scaler=o.scaler, epoch=epoch,
                             batches_done=batches_done, global_step=state.global_step, metrics=state.history,
                             best_score=state.best, best_epoch=state.best_epoch, recipe=self.recipe,
                             data_args=checkpoints.data_args(self.cfg), epoch_loss=epoch_loss,
                             precision=o.precision)

    def export(self, name: str) -> None:
        """--save-format folder: the model's weights as the model folder OUT/`name` (rank 0)."""
        if self.dist.main and self.cfg.run.save_format == "folder":
            if self.cfg.data.inputs:  # the folder says how this run's images were made: what `vspec eval` will use
                self.model.pretrained_cfg = run_pretrained_cfg(self.cfg.data.inputs, self.spec,
                                                               self.recipe.random_resized_crop)
            save_pretrained(self.model, self.out / name, self.spec)

    def summarize(self, final: dict[str, Any], stop: StopFlag) -> None:
        """OUT/final (--save-format folder), curves.png, summary.json and the closing line (rank 0), each while no
        stop signal has come (else Interrupted: --resume writes the rest); whether the ranks ended in sync."""
        dist, out, history = self.dist, self.out, self.state.history
        in_sync = distributed.ranks_in_sync(self.model, dist)
        left = []
        if dist.main and history:
            summary = run_folder.summary(final, self.score_key, self.state.best, len(history), dist.world, in_sync,
                                         self.optim.precision)
            left = run_folder.write_end(out, run_folder.end_files(self.cfg.run.save_format == "folder"), history,
                                        summary, lambda: self.export("final"), lambda: stop.signum is not None)
        if dist.main and history and not left:
            result = self.task.result(final.get(self.score_key, float("nan")), self.state.best)
            folders = f", model folders {out / 'best'} and {out / 'final'}" * (self.cfg.run.save_format == "folder")
            print(f"done: {len(history)} epoch{'s' * (len(history) != 1)}, {result}; checkpoint {self.last}, best "
                  f"{out / 'best.pt'}{folders}, metrics {out / 'metrics.jsonl'}, curves {out / 'curves.png'}"
                  + (f"; {dist.world} processes, weights in sync: {in_sync}" if dist.world > 1 else ""))
        if self.writer is not None:
            self.writer.close()
        distributed.finish(dist)
        if left:
            raise Interrupted(stop.signum, f"signal {stop.signum}: saved {self.last} at the end of the run (epoch "
                                           f"{len(history)}); {', '.join(left)} not written: --resume writes them")


def __getattr__(name: str):  # the previous release's names (vspec/_moved.py)
    return _moved(__name__, name)
