"""What a task decides for the training loop (vspec/train/engine.py): its data, its loss, its metrics on the
validation split, the score the best checkpoint is kept by, and how an epoch's record and line read. An image
task (`ImageTask`: top-1 / top-5, mixup and cutmix, an EMA's top-1) or a text task (`TextTask`: a GLUE task's or
rt-polarity's metrics, the tokenizer a run must keep); `make_task` picks by the spec's embedder."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import IterableDataset

from .. import spec as S
from ..convert.hf import load_hf_body
from ..extras import needs
from ..nn.token_losses import soft_cross_entropy
from . import gpu_data
from .checkpoints import CheckpointError
from .data import INTERPOLATION, build_datasets, build_transforms, eval_crop_ratio
from .datasets import DataError, entry
from .gpu_data import DevicePipeline, Indexed, WorkerPipeline, collate_encoded, device_batches
from .prefetch import DeviceNormalise
from .text import run_tokenizer
from .text.batches import pad_batch, text_datasets
from .text.metrics import headline, text_metrics
from .text.tokenizer import tokenizer_identity, tokenizer_mismatch
from .token_labels.dataset import TokenLabels
from .token_labels.mix import RelabelMix


# ---------------------------------------------------------------- pieces from timm
def make_criterion(recipe, num_classes: int):
    """(mixup / cutmix or None, the loss): timm's, as the recipe asks."""
    with needs("vspec's training"):
        from timm.data import Mixup  # extra
        from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy  # extra

    if recipe.mixup > 0 or recipe.cutmix > 0:
        mixup = Mixup(mixup_alpha=recipe.mixup, cutmix_alpha=recipe.cutmix, label_smoothing=recipe.smoothing,
                      num_classes=num_classes)
        return mixup, SoftTargetCrossEntropy()
    if recipe.smoothing > 0:
        return None, LabelSmoothingCrossEntropy(smoothing=recipe.smoothing)
    return None, nn.CrossEntropyLoss()


class RegressionLoss(nn.Module):
    """MSE between the single output and the target score (STS-B)."""

    def forward(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out.squeeze(-1).float(), target)


def token_grid(spec) -> int:
    """The side S of the square token grid a token-label target covers (S x S token targets): the spec's last
    stage's grid, under a class-token head with the dense auxiliary head."""
    if not any(o.target == "tokens" for o in spec.head.outputs()):
        raise ValueError(f"--token-labels: the spec's head ({spec.head.kind}) has no dense auxiliary head to train "
                         f"on them (ClassTokenHead(dense=DenseAux()), as Refined-ViT's and LV-ViT's)")
    h, w = S.layout(spec)[-1].tokens.grid
    if h != w:
        raise ValueError(f"--token-labels: the token grid is {h} x {w}; the released targets are square")
    return h


def to_device(batch, device):
    """A batch of images, or a text batch's dict of input_ids / attention_mask / token_type_ids, on `device`."""
    if isinstance(batch, dict):
        return {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    return batch.to(device, non_blocking=True)


def forward(model: nn.Module, batch):
    return model(**batch) if isinstance(batch, dict) else model(batch)


@torch.no_grad()
def evaluate(model: nn.Module, loader, device, amp_ctx, d, prepare=None) -> dict[str, float]:
    """Loss, top-1 and top-5 (%) over the whole split (summed over the processes, read back once); `prepare(images,
    train)` moves a batch to the device (and normalises it there: `DeviceNormalise`)."""
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=device)  # loss, top1, top5, count
    for images, target in loader:
        images = images.to(device, non_blocking=True) if prepare is None else prepare(images, False)
        target = target.to(device, non_blocking=True)
        with amp_ctx():
            logits = model(images).float()
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
    read back to the host once, at the end."""
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


# ---------------------------------------------------------------- the tasks
class ImageTask:
    """Images and their labels: top-1 / top-5, the best kept by top-1, the EMA's top-1 beside."""

    name = None
    unit = "img"
    score_key = "val_top1"

    def __init__(self, cfg, spec, recipe, d, device: torch.device):
        self.cfg, self.spec, self.r, self.d = cfg, spec, recipe, d
        # normalised on the device (timm's prefetcher) on CUDA, or where asked; in the workers otherwise
        on = cfg.run.normalise_on
        on = on if on != "auto" else ("device" if device.type == "cuda" else "host")
        self.device, self.channels_last = device, device.type == "cuda" and cfg.run.channels_last
        self.inputs = cfg.data.inputs or {}
        mean, std = self.inputs.get("mean"), self.inputs.get("std")
        self.normalise = None if on != "device" else DeviceNormalise(
            spec.in_chans, device, re_prob=recipe.re_prob, channels_last=self.channels_last, mean=mean, std=std)
        # JPEG files decoded and augmented on the device (vspec/train/gpu_data.py) where asked; auto is host while
        # the device path's intermittent stall on CUDA (issue 47) is open
        self.pipeline, self.in_workers = None, False
        if cfg.run.decode_on == "device":
            self.pipeline_args = dict(
                img_size=spec.img_size, in_chans=spec.in_chans, random_resized_crop=recipe.random_resized_crop,
                auto_augment=recipe.auto_augment, re_prob=recipe.re_prob,
                crop_ratio=eval_crop_ratio(recipe.random_resized_crop), mean=mean, std=std,
                interpolation=self.inputs.get("interpolation") or INTERPOLATION, channels_last=self.channels_last,
                seed=cfg.run.seed, rank=d.rank)
            self.pipeline = DevicePipeline(**self.pipeline_args, device=device)

    def prepare(self, images: torch.Tensor, train: bool) -> torch.Tensor:
        """A batch of the loader on the device, ready for the model: decoded and augmented there if the loader's
        are encoded (`DevicePipeline`), normalised there if they are uint8 (`DeviceNormalise`), channels-last on
        CUDA."""
        if train and self.in_workers:  # the workers' pipeline made it ready
            return images.to(self.device, non_blocking=True)
        if self.pipeline is not None:
            return self.pipeline(images, train)
        if self.normalise is not None:
            return self.normalise(images, train)
        images = images.to(self.device, non_blocking=True)
        return images.contiguous(memory_format=torch.channels_last) if self.channels_last else images

    def transfer(self, batch):
        """A training batch of the loader moved to the device ahead of `batches` (`Prefetcher`, on CUDA): images and
        labels, or only the labels of encoded images (the device pipeline decodes those from the host)."""
        images, target = batch
        if self.pipeline is not None and not self.in_workers:
            return images, target.to(self.device, non_blocking=True)
        return images.to(self.device, non_blocking=True), target.to(self.device, non_blocking=True)

    def batches(self, loader, train: bool, epoch: int = 0, start: int = 0):
        """The loader's batches (from batch `start` of `epoch`) ready on the device: (images, target)."""
        if self.pipeline is not None and not (train and self.in_workers):
            yield from device_batches(loader, self.pipeline, train, epoch, start)
            return
        for images, target in loader:  # ready where the workers made them ready (WorkerPipeline), or to be made
            yield self.prepare(images, train), target.to(self.device, non_blocking=True)

    def data(self):
        """(train, val, collate or None, num_classes): transforms at the scale training sees, datasets."""
        cfg, spec = self.cfg, self.spec
        if entry(cfg.data.name).modality != "image":  # the text options are DataConfig's to refuse
            raise ValueError(f"--data {cfg.data.name}: for a text body (the spec's embedder is {spec.embedder.kind})")
        if cfg.data.token_labels is not None:
            return self.token_label_data()
        if self.pipeline is not None:  # the workers read the files; the device does the rest
            train_ds, val_ds, num_classes = build_datasets(
                cfg.data.name, img_size=spec.img_size, in_chans=spec.in_chans, train_transform=None,
                eval_transform=None, data_dir=cfg.data.data_dir, download=cfg.data.download, seed=cfg.run.seed,
                encoded=True)
            asked, stream = cfg.run.decode_in, isinstance(train_ds, IterableDataset)
            if asked == "workers" and stream:
                raise DataError(f"--decode-in workers: for --data imagefolder ({cfg.data.name}'s workers read "
                                "their shards in order; --decode-in main)")
            if (asked if asked != "auto" else gpu_data.AHEAD) == "workers" and not stream:
                self.in_workers = True
                return Indexed(train_ds), val_ds, WorkerPipeline(self.pipeline_args, self.device), num_classes
            return train_ds, val_ds, collate_encoded, num_classes
        train_tf, eval_tf = self.transforms()
        train_ds, val_ds, num_classes = self.datasets(train_tf, eval_tf)
        return train_ds, val_ds, None, num_classes

    def transforms(self):
        """(train, eval) transforms of PIL images, at the scale training sees."""
        r, spec = self.r, self.spec
        on_device = self.normalise is not None
        inputs = {k: self.inputs[k] for k in ("mean", "std", "interpolation") if self.inputs.get(k) is not None}
        train_tf = build_transforms(spec.img_size, spec.in_chans, train=True, auto_augment=r.auto_augment,
                                    re_prob=r.re_prob, random_resized_crop=r.random_resized_crop, on_device=on_device,
                                    **inputs)
        # at the scale training sees (a 0.875 crop after a plain resize would enlarge every digit by 8 / 7)
        eval_tf = build_transforms(spec.img_size, spec.in_chans, train=False,
                                   crop_ratio=eval_crop_ratio(r.random_resized_crop), on_device=on_device, **inputs)
        return train_tf, eval_tf

    def datasets(self, train_tf, eval_tf):
        cfg, spec = self.cfg, self.spec
        return build_datasets(
            cfg.data.name, img_size=spec.img_size, in_chans=spec.in_chans, train_transform=train_tf,
            eval_transform=eval_tf, data_dir=cfg.data.data_dir, download=cfg.data.download,
            synthetic_size=cfg.data.synthetic_size, seed=cfg.run.seed,
            num_classes=spec.num_classes if cfg.data.name == "synthetic" else None)

    def token_label_data(self):
        """--token-labels: each training image with its label map, augmented together (TokenLabels); the
        validation split as without."""
        token_grid(self.spec)  # refuses a spec without the dense head first
        if self.cfg.run.decode_on == "device":
            raise DataError("--token-labels: the label maps are cropped and flipped on the host (--decode-on host)")
        train_tf, eval_tf = self.transforms()
        train_ds, val_ds, num_classes = self.datasets(None, eval_tf)
        data = {"data": self.cfg.data.name, "data_dir": self.cfg.data.data_dir}  # what labels.json names
        train_ds = TokenLabels(train_ds, self.cfg.data.token_labels, train_tf, num_classes=num_classes, data=data)
        return train_ds, val_ds, None, num_classes

    def init_model(self, model: nn.Module) -> None:
        """A fresh run's starting weights beyond the spec's initialisation: an image model has none of its own."""
        if self.cfg.run.init is not None:
            raise ValueError(f"--init: for a text body (the spec's embedder is {self.spec.embedder.kind})")

    def loss(self, num_classes: int):
        """(the batch's mixing or None, the criterion); with token labels the mixing also builds the token targets
        (B, C, 2 + S²) from the batch's label maps (RelabelMix: mixup / cutmix as released, or lam 1)."""
        if self.cfg.data.token_labels is None:
            return make_criterion(self.r, num_classes)
        r = self.r
        # each map was checked as TokenLabels read it (check_map): the step reads nothing back to check them again
        mix = RelabelMix(num_classes, mixup_alpha=r.mixup, cutmix_alpha=r.cutmix, smoothing=r.smoothing,
                         label_size=token_grid(self.spec), released_alignment=r.released_alignment, check=False)
        return mix, soft_cross_entropy

    def evaluate(self, model, ema, loader, device, amp_ctx) -> dict[str, float]:
        """val_loss, val_top1, val_top5 (and ema_val_top1 with an EMA)."""
        val = evaluate(model, loader, device, amp_ctx, self.d, self.prepare)
        out = {"val_loss": val["loss"], "val_top1": val["top1"], "val_top5": val["top5"]}
        if ema is not None:
            out["ema_val_top1"] = evaluate(ema.module, loader, device, amp_ctx, self.d, self.prepare)["top1"]
        return out

    def record(self, epoch: int, train_loss: float, val: dict[str, float], lr: float, speed: float, elapsed: float,
               step: int) -> dict[str, Any]:
        ema = {"ema_val_top1": val["ema_val_top1"]} if "ema_val_top1" in val else {}
        return {"epoch": epoch, "train_loss": train_loss, "val_loss": val["val_loss"], "val_top1": val["val_top1"],
                "val_top5": val["val_top5"], "lr": lr, "images_per_s": speed, "epoch_time_s": elapsed, "step": step,
                **ema}

    def line(self, record: dict[str, Any]) -> str:
        return (f"epoch {record['epoch']}: train_loss {record['train_loss']:.4f}  val_loss {record['val_loss']:.4f}  "
                f"val_top1 {record['val_top1']:.2f}  val_top5 {record['val_top5']:.2f}  "
                f"{record['images_per_s']:.1f} img/s")

    def result(self, score: float, best: float) -> str:
        return f"val top-1 {score:.2f} % (best {best:.2f} %)"

    def state(self) -> dict[str, Any]:
        """What the task adds to every checkpoint: the inputs the run used (`vspec eval` reads them)."""
        return {"inputs": dict(self.inputs)} if self.inputs else {}


class TextTask:
    """A GLUE task or rt-polarity, tokenised once: its metrics, the best kept by its headline metric; the
    tokenizer's files are in every checkpoint, and a resume with another is refused."""

    unit = "samples"

    def __init__(self, cfg, spec, recipe, d, out, ckpt, device: torch.device):
        self.cfg, self.spec, self.r, self.d, self.out, self.ckpt = cfg, spec, recipe, d, out, ckpt
        self.device = device
        self.name, self.tokenizer = None, {}

    @property
    def score_key(self) -> str:
        return f"val_{headline(self.name)}"

    def data(self):
        """(train, val, collate, num_classes): the text datasets (vspec/train/text/), tokenised once; the
        tokenizer trained on rank 0 first."""
        cfg, r, spec = self.cfg, self.r, self.spec
        if r.mixup > 0 or r.cutmix > 0:
            raise ValueError("--mixup / --cutmix mix images; a text body trains without them (--recipe glue)")
        room = spec.embedder.max_positions - spec.embedder.first_position
        max_len = cfg.data.max_len or spec.embedder.seq_len
        if max_len > room:
            raise ValueError(f"--max-len {max_len}: the spec's position table holds {room} tokens")
        saved = self.ckpt.get("tokenizer") if self.ckpt is not None else None
        if saved is not None:  # a resume encodes with the very tokenizer the run began with, or not at all
            problem = tokenizer_mismatch(saved, Path(cfg.data.tokenizer or run_tokenizer(self.out)))
            if problem:
                raise CheckpointError(self.out / "last.pt", f"--resume: {problem}; restore it, or start a new run")

        def read():
            return text_datasets(cfg.data.name, task=cfg.data.task, data_dir=cfg.data.data_dir,
                                 tokenizer=cfg.data.tokenizer, max_len=max_len, vocab_size=spec.embedder.vocab_size,
                                 out=self.out)
        data = read() if self.d.main else None  # one tokenizer, trained once (rank 0), then read by the others
        if self.d.world > 1:
            dist.barrier()
        data = data or read()
        self.name = data.task
        self.tokenizer = tokenizer_identity(data.tokenizer)
        return data.train, data.val, pad_batch(data.pad_id), data.num_classes

    def init_model(self, model: nn.Module) -> None:
        """--init hf:DIR: a fresh run's body starts from a Hugging Face checkpoint folder's (its head fresh)."""
        if self.cfg.run.init is None:
            return

        for line in load_hf_body(model, self.cfg.run.init.removeprefix("hf:")):
            if self.d.main:
                print(f"note: --init: {line}", file=sys.stderr)

    def loss(self, num_classes: int):
        mixup, criterion = make_criterion(self.r, num_classes)
        return mixup, RegressionLoss() if num_classes == 1 else criterion  # STS-B's scores

    def prepare(self, batch, train: bool):
        """A batch's input_ids / attention_mask / token_type_ids on the device."""
        return to_device(batch, self.device)

    def transfer(self, batch):
        """A training batch of the loader on the device, moved ahead of `batches` (`Prefetcher`, on CUDA)."""
        inputs, target = batch
        return to_device(inputs, self.device), target.to(self.device, non_blocking=True)

    def batches(self, loader, train: bool, epoch: int = 0, start: int = 0):
        """The loader's batches ready on the device: (inputs, target)."""
        for batch, target in loader:
            yield self.prepare(batch, train), target.to(self.device, non_blocking=True)

    def evaluate(self, model, ema, loader, device, amp_ctx) -> dict[str, float]:
        return {f"val_{k}": v for k, v in evaluate_text(model, loader, device, amp_ctx, self.d, self.name).items()}

    def record(self, epoch: int, train_loss: float, val: dict[str, float], lr: float, speed: float, elapsed: float,
               step: int) -> dict[str, Any]:
        return {"epoch": epoch, "train_loss": train_loss, **val, "lr": lr, "samples_per_s": speed,
                "epoch_time_s": elapsed, "step": step}

    def line(self, record: dict[str, Any]) -> str:
        shown = "  ".join(f"{k} {v:.4f}" for k, v in record.items() if k.startswith("val_"))
        return (f"epoch {record['epoch']}: train_loss {record['train_loss']:.4f}  {shown}  "
                f"{record['samples_per_s']:.1f} samples/s")

    def result(self, score: float, best: float) -> str:
        return f"val {self.score_key.removeprefix('val_')} {score:.4f} (best {best:.4f})"

    def state(self) -> dict[str, Any]:
        return {"tokenizer": self.tokenizer}


def make_task(cfg, spec, recipe, d, out, ckpt, device: torch.device) -> ImageTask | TextTask:
    """The task of a run: a text body's (its embedder reads token ids) or an image model's."""
    if spec.embedder.text:
        return TextTask(cfg, spec, recipe, d, out, ckpt, device)
    return ImageTask(cfg, spec, recipe, d, device)
