"""The ecosystem's download caches, filled by a test as the real downloads leave them (no network).

Hugging Face's hub cache (huggingface_hub's layout, read back with its own `try_to_load_from_cache` and
`scan_cache_dir`): `models--<owner>--<name>/blobs/<sha256 of the file>` (the Hub names an LFS blob by its
content's digest), `snapshots/<commit>/<file>` a relative link to the blob, `refs/<revision>` holding the commit.
torch hub's: `<TORCH_HOME>/hub/checkpoints/<file name>`.
"""

import argparse
import hashlib
import io
import os
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"  # any 40-hex commit, as the Hub's


def hub_put(cache: Path, repo: str, file: str, data: bytes, revision: str = "main") -> Path:
    """Put `data` as `repo`'s `file` into the Hugging Face hub cache `cache` (HF_HUB_CACHE); returns the
    snapshot path."""
    root = cache / f"models--{repo.replace('/', '--')}"
    blob = root / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / revision).write_text(COMMIT)
    link = root / "snapshots" / COMMIT / file
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(blob, link.parent))
    return link


def torch_put(torch_home: Path, file: str, data: bytes) -> Path:
    """Put `data` as torch hub's checkpoint `file` under TORCH_HOME `torch_home`."""
    path = torch_home / "hub" / "checkpoints" / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def safetensors_bytes(state: dict) -> bytes:
    """A state dict as a .safetensors file's bytes (timm's and Hugging Face's published format)."""
    from safetensors.torch import save

    return save({k: v.contiguous() for k, v in state.items()})


def pickle_bytes(obj) -> bytes:
    """`obj` as torch.save writes it (a .pth / .pth.tar / pytorch_model.bin file's bytes)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def release_args(**fields) -> argparse.Namespace:
    """The `args` a released training script saves in its checkpoints: its parsed command line (timm's train.py,
    the DeiT-style main.py), plain values only."""
    return argparse.Namespace(**{"model": "t2t_vit_7", "batch_size": 64, "lr": 5e-4, "epochs": 310, "img_size": 224,
                                 "mean": None, "betas": (0.9, 0.999), "sched": "cosine", "distributed": True,
                                 "device": "cuda:0", **fields})


def optimizer_state(state: dict) -> dict:
    """An AdamW state dict over `state`'s tensors as a training run saves it (step, exp_avg, exp_avg_sq)."""
    import torch

    tensors = list(state.values())
    return {"state": {i: {"step": torch.tensor(300.0), "exp_avg": torch.zeros_like(t, dtype=torch.float32),
                          "exp_avg_sq": torch.zeros_like(t, dtype=torch.float32)}
                      for i, t in enumerate(tensors) if t.is_floating_point()},
            "param_groups": [{"lr": 1e-6, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.05,
                              "params": list(range(len(tensors)))}]}


def released_preset(folder: Path, name: str, converter: str, config: dict, source: str, *, params: int,
                    unwrap: tuple[str, ...], classes: int) -> Path:
    """Write preset `name` into `folder` (a VSPEC_SPECS folder): the released `converter`'s spec of `config`, with
    one weights entry "released" from `source` (a Python expression: `Url(...)`, `Manual(...)`) holding `params`
    parameters and `classes` classes, read from the file's `unwrap` entry; ImageNet inputs, crop 0.9."""
    path = folder / f"{name}.py"
    path.write_text(
        "from vspec.convert import official\n"
        "from vspec.spec import IMAGENET_MEAN, IMAGENET_STD, Manual, Preprocess, PublishedWeights, Url\n"
        f"CONFIG = {config!r}\n"
        f"SPEC = official()[{converter!r}].spec_of(CONFIG)\n"
        f"WEIGHTS = {{'released': PublishedWeights(source={source}, converter={converter!r}, params={params}, "
        f"licence='Apache-2.0', classes={classes}, config=CONFIG, unwrap={unwrap!r}, "
        "preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9))}\n")
    return path
