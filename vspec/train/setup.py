"""The setup of a training run (vspec/train/engine.py's `run`), as functions that return what they make: the final
spec with the data it trains on (`spec_and_data`: the spec settled once, before the task is made)."""

from __future__ import annotations

import sys

import attrs
import torch

from ..spec import from_json
from .data.preprocess import inputs_line
from .data.splits import Splits
from .recipes import training_spec
from .tasks import task_type


def spec_and_data(cfg, dist, device: torch.device, ckpt=None):
    """(the spec the run trains, its splits): the spec as the recipe trains it (`training_spec`), its splits read by
    its task's type (`Task.read`), then its num_classes set to the data set's; on --resume the checkpoint's spec
    (`checkpoints.check_resume` found it the same but for num_classes, which the data set decides)."""
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
