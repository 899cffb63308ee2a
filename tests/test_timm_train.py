"""A real client that no one here wrote (issue 54, item 11): vspec models, registered with timm, driven through the
library calls of timm's own train.py (timm 1.0.31, its create_model call and training step read from the
repository's train.py, none of its code copied): `timm.create_model` with the keywords the script always passes,
`set_grad_checkpointing`, `resolve_data_config`, `create_dataset` / `create_loader` on an ImageFolder,
`create_optimizer_v2(..., layer_decay=0.75)`, `Mixup`, `SoftTargetCrossEntropy`, the `ClassificationTask` with its
`ModelEmaV3`, then validation on the eval loader."""

import math

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from timm.data import Mixup, create_dataset, create_loader, resolve_data_config
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.task import ClassificationTask
from timm.utils import ModelEmaV3

import vspec

CLASSES, PER_CLASS, BATCH = 3, 4, 4
# train.py's create_model keywords at its defaults (`--model-kwargs` adds the rest: here a small model)
TRAIN_PY = {"pretrained": False, "in_chans": 3, "num_classes": CLASSES, "drop_rate": 0.0, "drop_path_rate": 0.1,
            "drop_block_rate": None, "global_pool": None, "bn_momentum": None, "bn_eps": None, "scriptable": False,
            "checkpoint_path": ""}
# train.py's data arguments resolve_data_config reads (vars(args)), all at their defaults
ARGS = {"input_size": None, "img_size": None, "in_chans": None, "interpolation": "", "mean": None, "std": None,
        "crop_pct": None}

torch.set_num_threads(2)


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """train/ and val/ ImageFolders of a few 40 x 40 PNGs per class, a colour each."""
    root = tmp_path_factory.mktemp("imagefolder")
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in range(CLASSES):
            (root / split / f"class{c}").mkdir(parents=True)
            for i in range(PER_CLASS):
                pixels = rng.integers(0, 80, (40, 40, 3)) + np.eye(3, dtype=int)[c] * 170
                Image.fromarray(pixels.astype(np.uint8)).save(root / split / f"class{c}" / f"{i}.png")
    return root


@pytest.mark.parametrize("name, model_kwargs", [("vspec_deit_tiny", {"img_size": 32, "depth": 2}),
                                                ("vspec_lvvit_t", {"img_size": 32, "depth": 2})])
def test_timm_train_py_library_calls_train_a_vspec_model(image_folder, name, model_kwargs):
    vspec.register_timm()
    torch.manual_seed(0)
    model = timm.create_model(name, **TRAIN_PY, **model_kwargs)
    model.set_grad_checkpointing(enable=True)
    data_config = resolve_data_config(ARGS, model=model)
    assert data_config["input_size"] == (3, 32, 32)

    dataset_train = create_dataset("", root=str(image_folder), split="train", is_training=True, batch_size=BATCH)
    dataset_eval = create_dataset("", root=str(image_folder), split="validation", is_training=False,
                                  batch_size=BATCH)
    assert len(dataset_train) == len(dataset_eval) == CLASSES * PER_CLASS
    mixup_fn = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, prob=1.0, switch_prob=0.5, mode="batch",
                     label_smoothing=0.1, num_classes=CLASSES)
    loader_train = create_loader(dataset_train, input_size=data_config["input_size"], batch_size=BATCH,
                                 is_training=True, re_prob=0.25, interpolation=data_config["interpolation"],
                                 mean=data_config["mean"], std=data_config["std"], num_workers=0,
                                 use_prefetcher=False, device=torch.device("cpu"))
    loader_eval = create_loader(dataset_eval, input_size=data_config["input_size"], batch_size=BATCH,
                                is_training=False, interpolation=data_config["interpolation"],
                                crop_pct=data_config["crop_pct"], mean=data_config["mean"], std=data_config["std"],
                                num_workers=0, use_prefetcher=False, device=torch.device("cpu"))

    task = ClassificationTask(model=model, criterion=SoftTargetCrossEntropy(), device=torch.device("cpu"),
                              verbose=False)
    model = task.get_trainable_module()
    optimizer = create_optimizer_v2(model, opt="adamw", lr=1e-3, weight_decay=0.05, layer_decay=0.75)
    assert len({g["lr_scale"] for g in optimizer.param_groups}) == 2 + 2  # stem, two blocks, head
    task.setup_ema(decay=0.9)
    assert isinstance(task.get_trainable_module(ema=True), ModelEmaV3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ema_before = {k: v.clone() for k, v in task.get_trainable_module(ema=True).module.state_dict().items()}

    model.train()
    losses, updates = [], 0
    for epoch in range(2):
        for x, target in loader_train:
            x, target = mixup_fn(x, target)
            loss = task(x, target)["loss"]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            updates += 1
            task.update_ema(step=updates)
            losses.append(loss.item())
    assert updates == 2 * CLASSES * PER_CLASS // BATCH and all(map(math.isfinite, losses)), losses
    after = model.state_dict()
    assert all(not torch.equal(after[k], v) for k, v in before.items() if k.endswith("weight") and v.ndim > 1)
    ema = task.get_trainable_module(ema=True).module.state_dict()
    assert any(not torch.equal(ema[k], v) for k, v in ema_before.items())

    eval_model = task.get_eval_model(ema=True)
    eval_model.eval()
    with torch.no_grad():
        for x, target in loader_eval:
            out = eval_model(x)
            assert out.shape == (len(x), CLASSES) and torch.isfinite(out).all()
