"""The text task of a run (`TextTask`): a GLUE task, rt-polarity or a data set's own classes, tokenised once
(vspec/train/text/); its loss, metrics (its task's), records and lines; the tokenizer a run must keep."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch import distributed, nn

from ...convert.hf import load_hf_body
from ..checkpoints import TEXT_RECORD_KEYS, CheckpointError
from ..data.loader import on_device, to_device, transfer
from ..data.registry import options
from ..data.splits import Splits
from ..evaluate import evaluate_text
from ..losses import RegressionLoss, make_criterion
from ..text import run_tokenizer
from ..text.batches import pad_batch, text_datasets, token_types
from ..text.metrics import headline
from ..text.readers import GLUE
from ..text.tokenizer import tokenizer_identity, tokenizer_mismatch

__all__ = ["TextTask", "text_score_key"]

KNOWN = (*GLUE, "rt-polarity")  # the tasks known by name


def text_score_key(task, ckpt=None) -> str:
    """The record's entry a text run's best checkpoint is kept by: its task's headline metric. A data set's own
    task whose data is not read (a finished run's files written again): its checkpoint's records say.

    Args:
        task: a GLUE task's name, rt-polarity, or a data set's own `Task`.
        ckpt: the run's checkpoint (its records), or None."""
    if isinstance(task, str) and task not in KNOWN and ckpt is not None and ckpt["metrics"]:
        return "val_pearson" if "val_pearson" in ckpt["metrics"][-1] else "val_accuracy"
    return f"val_{headline(task)}"


class TextTask:
    """A GLUE task, rt-polarity or a data set's own, tokenised once: its metrics, the best kept by its headline
    metric; the tokenizer's files are in every checkpoint, and a resume with another is refused."""

    unit = "samples"
    record_keys = TEXT_RECORD_KEYS

    def __init__(self, cfg, spec, splits: Splits, dist, device: torch.device, ckpt=None):
        self.cfg, self.spec, self.recipe, self.dist, self.ckpt = cfg, spec, cfg.recipe, dist, ckpt
        self.device = device
        # the task: a GLUE task's or rt-polarity, or a data set's own `Task` (vspec/train/text/readers.py)
        self.name, self.tokenizer = splits.task, splits.tokenizer

    @property
    def score_key(self) -> str:
        """The record's entry the best checkpoint is kept by: the task's headline metric (`text_score_key`)."""
        return text_score_key(self.name, self.ckpt)

    @classmethod
    def read(cls, cfg, spec, dist, device: torch.device, ckpt=None) -> Splits:
        """The text datasets (vspec/train/text/batches.py), tokenised once; the tokenizer trained on rank 0 first. On
        --resume (`ckpt`), the tokenizer the run began with or a refusal."""
        recipe, out = cfg.recipe, Path(cfg.run.out)
        if recipe.mixup > 0 or recipe.cutmix > 0:
            raise ValueError("--mixup / --cutmix mix images; a text body trains without them (--recipe glue)")
        if cfg.data.streaming:
            raise ValueError("--streaming: for an image model; a text body reads its splits whole (leave it out)")
        room = spec.embedder.max_positions - spec.embedder.first_position
        max_len = cfg.data.max_len or spec.embedder.seq_len
        if max_len > room:
            raise ValueError(f"--max-len {max_len}: the spec's position table holds {room} tokens")
        saved = ckpt.get("tokenizer") if ckpt is not None else None
        if saved is not None:  # a resume encodes with the very tokenizer the run began with, or not at all
            problem = tokenizer_mismatch(saved, Path(cfg.data.tokenizer or run_tokenizer(out)))
            if problem:
                raise CheckpointError(out / "last.pt", f"--resume: {problem}; restore it, or start a new run")

        def read():
            return text_datasets(cfg.data.name, task=cfg.data.task, data_dir=cfg.data.data_dir,
                                 tokenizer=cfg.data.tokenizer, max_len=max_len, vocab_size=spec.embedder.vocab_size,
                                 out=out, token_types=token_types(spec), **options(cfg.data))
        data = read() if dist.main else None  # one tokenizer, trained once (rank 0), then read by the others
        if dist.world > 1:
            distributed.barrier()
        data = data or read()
        return Splits(data.train, data.val, data.num_classes, pad_batch(data.pad_id, token_types(spec)),
                      task=data.task, tokenizer=tokenizer_identity(data.tokenizer))

    def init_model(self, model: nn.Module) -> None:
        """--init hf:DIR: a fresh run's body starts from a Hugging Face checkpoint folder's (its head fresh)."""
        if self.cfg.run.init is None:
            return

        for line in load_hf_body(model, self.cfg.run.init.removeprefix("hf:")):
            if self.dist.main:
                print(f"note: --init: {line}", file=sys.stderr)

    def loss(self, num_classes: int):
        """(mixup / cutmix or None, the criterion) as the recipe asks (`make_criterion`); one output: regression."""
        mixup, criterion = make_criterion(self.recipe, num_classes)
        return mixup, RegressionLoss() if num_classes == 1 else criterion  # STS-B's scores

    def prepare(self, batch, train: bool):
        """A batch's input_ids / attention_mask / token_type_ids on the device."""
        return to_device(batch, self.device)

    def transfer(self, batch):
        """A training batch of the loader on the device, moved ahead of `batches` (`Prefetcher`, on CUDA)."""
        return transfer(batch, self.device)

    def batches(self, loader, train: bool, epoch: int = 0, start: int = 0):
        """The loader's batches ready on the device: (inputs, target)."""
        return on_device(loader, self.prepare, train, self.device)

    def evaluate(self, model, ema, loader, device, amp_ctx) -> dict[str, float]:
        """The task's metrics on the validation split, each `val_`-prefixed (the EMA is not evaluated)."""
        metrics = evaluate_text(model, loader, device, amp_ctx, self.dist, self.name)
        return {f"val_{k}": v for k, v in metrics.items()}

    def record(self, epoch: int, train_loss: float, val: dict[str, float], lr: float, speed: float, elapsed: float,
               step: int) -> dict[str, Any]:
        """An epoch's record: its training loss, the validation metrics, lr, samples/s, time and step."""
        return {"epoch": epoch, "train_loss": train_loss, **val, "lr": lr, "samples_per_s": speed,
                "epoch_time_s": elapsed, "step": step}

    def line(self, record: dict[str, Any]) -> str:
        """An epoch's line on stderr: its training loss, each validation metric and samples/s."""
        shown = "  ".join(f"{k} {v:.4f}" for k, v in record.items() if k.startswith("val_"))
        return (f"epoch {record['epoch']}: train_loss {record['train_loss']:.4f}  {shown}  "
                f"{record['samples_per_s']:.1f} samples/s")

    def result(self, score: float, best: float) -> str:
        """The closing line's result: the last and the best score of the headline metric."""
        return f"val {self.score_key.removeprefix('val_')} {score:.4f} (best {best:.4f})"

    def state(self) -> dict[str, Any]:
        """What the task adds to every checkpoint: the tokenizer's files (a resume with another is refused)."""
        return {"tokenizer": self.tokenizer}
