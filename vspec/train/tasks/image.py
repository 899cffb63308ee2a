"""The image task of a run (`ImageTask`): its data (by the input path it chose, vspec/train/data/pipelines.py), its
loss (with token labels, RelabelMix's), its metrics (top-1 / top-5, an EMA's top-1), records and lines."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...nn.token_losses import soft_cross_entropy
from ...spec import layout
from ..data.pipelines import input_path
from ..data.preprocess import eval_crop_ratio
from ..data.registry import DataError, entry
from ..data.sources import build_datasets
from ..data.transforms import build_transforms
from ..evaluate import evaluate
from ..losses import make_criterion
from ..token_labels.dataset import TokenLabels
from ..token_labels.mix import RelabelMix


def token_grid(spec) -> int:
    """The side S of the square token grid a token-label target covers (S x S token targets): the spec's last
    stage's grid, under a class-token head with the dense auxiliary head."""
    if not any(o.target == "tokens" for o in spec.head.outputs()):
        raise ValueError(f"--token-labels: the spec's head ({spec.head.kind}) has no dense auxiliary head to train "
                         f"on them (ClassTokenHead(dense=DenseAux()), as Refined-ViT's and LV-ViT's)")
    h, w = layout(spec)[-1].tokens.grid
    if h != w:
        raise ValueError(f"--token-labels: the token grid is {h} x {w}; the released targets are square")
    return h


class ImageTask:
    """Images and their labels: top-1 / top-5, the best kept by top-1, the EMA's top-1 beside. Its input path
    (`self.path`, vspec/train/data/pipelines.py) is chosen once: host, normalised or decoded on the device."""

    unit = "img"
    score_key = "val_top1"

    def __init__(self, cfg, spec, recipe, dist, device: torch.device):
        self.cfg, self.spec, self.recipe, self.dist, self.device = cfg, spec, recipe, dist, device
        self.inputs = cfg.data.inputs or {}
        self.path = input_path(cfg.run, recipe, spec, self.inputs, dist.rank, device)

    @property
    def in_workers(self) -> bool:
        """The loader's workers make the training batches ready on the device (--decode-in workers)."""
        return self.path.in_workers

    def prepare(self, images: torch.Tensor, train: bool) -> torch.Tensor:
        """A batch of the loader on the device, ready for the model (the input path's)."""
        return self.path.prepare(images, train)

    def transfer(self, batch):
        """A training batch of the loader moved to the device ahead of `batches` (`Prefetcher`, on CUDA)."""
        return self.path.transfer(batch)

    def batches(self, loader, train: bool, epoch: int = 0, start: int = 0):
        """The loader's batches (from batch `start` of `epoch`) ready on the device: (images, target)."""
        return self.path.batches(loader, train, epoch, start)

    def data(self):
        """(train, val, collate or None, num_classes): transforms at the scale training sees, datasets."""
        cfg, spec = self.cfg, self.spec
        if entry(cfg.data.name).modality != "image":  # the text options are DataConfig's to refuse
            raise ValueError(f"--data {cfg.data.name}: for a text body (the spec's embedder is {spec.embedder.kind})")
        if cfg.data.token_labels is not None:
            return self.token_label_data()
        if self.path.encoded:  # the workers read the files; the device does the rest
            train_ds, val_ds, num_classes = build_datasets(
                cfg.data.name, img_size=spec.img_size, in_chans=spec.in_chans, train_transform=None,
                eval_transform=None, data_dir=cfg.data.data_dir, download=cfg.data.download, seed=cfg.run.seed,
                encoded=True)
            self.path, train_ds, val_ds, collate = self.path.settle(train_ds, val_ds, cfg.data.name)
            return train_ds, val_ds, collate, num_classes
        train_tf, eval_tf = self.transforms()
        train_ds, val_ds, num_classes = self.datasets(train_tf, eval_tf)
        return train_ds, val_ds, None, num_classes

    def transforms(self):
        """(train, eval) transforms of PIL images, at the scale training sees."""
        recipe, spec = self.recipe, self.spec
        on_device = self.path.on_device
        inputs = {k: self.inputs[k] for k in ("mean", "std", "interpolation") if self.inputs.get(k) is not None}
        train_tf = build_transforms(spec.img_size, spec.in_chans, train=True, auto_augment=recipe.auto_augment,
                                    re_prob=recipe.re_prob, random_resized_crop=recipe.random_resized_crop,
                                    on_device=on_device, **inputs)
        # at the scale training sees (a 0.875 crop after a plain resize would enlarge every digit by 8 / 7)
        eval_tf = build_transforms(spec.img_size, spec.in_chans, train=False,
                                   crop_ratio=eval_crop_ratio(recipe.random_resized_crop), on_device=on_device,
                                   **inputs)
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
