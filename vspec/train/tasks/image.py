"""The image task of a run (`ImageTask`): its input path (chosen once, vspec/train/data/pipelines.py) and splits
(vspec/train/data/splits.py), its loss (with token labels, RelabelMix's), its metrics (top-1 / top-5, an EMA's
top-1), records and lines."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...nn.token_losses import soft_cross_entropy
from ..checkpoints import RECORD_KEYS
from ..data.pipelines import input_path, input_way
from ..data.splits import Splits, image_splits
from ..evaluate import evaluate
from ..losses import make_criterion
from ..token_labels.maps import token_grid
from ..token_labels.mix import RelabelMix

__all__ = ["ImageTask"]


class ImageTask:
    """Images and their labels: top-1 / top-5, the best kept by top-1, the EMA's top-1 beside. Its input path
    (`self.input_path`, vspec/train/data/pipelines.py) is chosen once: host, normalised or decoded on the device."""

    unit = "img"
    score_key = "val_top1"
    record_keys = RECORD_KEYS

    def __init__(self, cfg, spec, splits: Splits, dist, device: torch.device, ckpt=None):
        self.cfg, self.spec, self.recipe, self.dist, self.device = cfg, spec, cfg.recipe, dist, device
        self.inputs = cfg.data.inputs or {}
        self.input_path = splits.input_path

    @classmethod
    def read(cls, cfg, spec, dist, device: torch.device, ckpt=None) -> Splits:
        """The run's splits built for its input way (vspec/train/data/splits.py), then its input path chosen for
        them (vspec/train/data/pipelines.py); `spec`: the spec as the recipe trains it (its num_classes is the data
        set's after)."""
        inputs, way = cfg.data.inputs or {}, input_way(cfg.run, device)
        train, val, num_classes = image_splits(cfg, spec, cfg.recipe, way, inputs)
        path, train, collate = input_path(cfg.run, cfg.recipe, spec, inputs, dist.rank, device, train, cfg.data.name)
        return Splits(train, val, num_classes, collate, input_path=path)

    @property
    def in_workers(self) -> bool:
        """The loader's workers make the training batches ready on the device (--decode-in workers)."""
        return self.input_path.in_workers

    def prepare(self, batch: torch.Tensor, train: bool) -> torch.Tensor:
        """A batch of the loader on the device, ready for the model (the input path's)."""
        return self.input_path.prepare(batch, train)

    def transfer(self, batch):
        """A training batch of the loader moved to the device ahead of `batches` (`Prefetcher`, on CUDA)."""
        return self.input_path.transfer(batch)

    def batches(self, loader, train: bool, epoch: int = 0, start: int = 0):
        """The loader's batches (from batch `start` of `epoch`) ready on the device: (images, target)."""
        return self.input_path.batches(loader, train, epoch, start)

    def init_model(self, model: nn.Module) -> None:
        """A fresh run's starting weights beyond the spec's initialisation: an image model has none of its own."""
        if self.cfg.run.init is not None:
            raise ValueError(f"--init: for a text body (the spec's embedder is {self.spec.embedder.kind})")

    def loss(self, num_classes: int):
        """(the batch's mixing or None, the criterion); with token labels the mixing also builds the token targets
        (B, C, 2 + S²) from the batch's label maps (RelabelMix: mixup / cutmix as released, or lam 1)."""
        if self.cfg.data.token_labels is None:
            return make_criterion(self.recipe, num_classes)
        recipe = self.recipe
        # each map was checked as TokenLabels read it (check_map): the step reads nothing back to check them again
        mix = RelabelMix(num_classes, mixup_alpha=recipe.mixup, cutmix_alpha=recipe.cutmix,
                         smoothing=recipe.smoothing,
                         label_size=token_grid(self.spec), released_alignment=recipe.released_alignment,
                         check=False)
        return mix, soft_cross_entropy

    def evaluate(self, model, ema, loader, device, amp_ctx) -> dict[str, float]:
        """val_loss, val_top1, val_top5 (and ema_val_top1 with an EMA)."""
        val = evaluate(model, loader, device, amp_ctx, self.dist, self.prepare)
        out = {"val_loss": val["loss"], "val_top1": val["top1"], "val_top5": val["top5"]}
        if ema is not None:
            out["ema_val_top1"] = evaluate(ema.module, loader, device, amp_ctx, self.dist, self.prepare)["top1"]
        return out

    def record(self, epoch: int, train_loss: float, val: dict[str, float], lr: float, speed: float, elapsed: float,
               step: int) -> dict[str, Any]:
        """An epoch's record: its losses, top-1 / top-5 (the EMA's top-1), lr, images/s, time and step."""
        ema = {"ema_val_top1": val["ema_val_top1"]} if "ema_val_top1" in val else {}
        return {"epoch": epoch, "train_loss": train_loss, "val_loss": val["val_loss"], "val_top1": val["val_top1"],
                "val_top5": val["val_top5"], "lr": lr, "images_per_s": speed, "epoch_time_s": elapsed, "step": step,
                **ema}

    def line(self, record: dict[str, Any]) -> str:
        """An epoch's line on stderr: its losses, top-1, top-5 and images/s."""
        return (f"epoch {record['epoch']}: train_loss {record['train_loss']:.4f}  val_loss {record['val_loss']:.4f}  "
                f"val_top1 {record['val_top1']:.2f}  val_top5 {record['val_top5']:.2f}  "
                f"{record['images_per_s']:.1f} img/s")

    def result(self, score: float, best: float) -> str:
        """The closing line's result: the last and the best top-1, in %."""
        return f"val top-1 {score:.2f} % (best {best:.2f} %)"

    def state(self) -> dict[str, Any]:
        """What the task adds to every checkpoint: the inputs the run used (`vspec eval` reads them)."""
        return {"inputs": dict(self.inputs)} if self.inputs else {}
