"""Checkpoints that carry their spec: `{"format", "spec" (JSON text), "state_dict"}`."""

from pathlib import Path

import torch
from torch import nn

from .compiler import build
from .spec import Model, SpecError, from_json, to_json

FORMAT = "vspec-checkpoint-1"


def save(model: nn.Module, path: str | Path, spec: Model | None = None) -> Path:
    """Write `model`'s weights with its spec (default `model.spec`) as JSON."""
    spec = spec if spec is not None else model.spec
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": FORMAT, "spec": to_json(spec), "state_dict": model.state_dict()}, path)
    return path


def load_checkpoint(path: str | Path) -> dict:
    """The raw checkpoint dict, read with weights_only=True; errors are one-line SpecErrors."""
    path = Path(path)
    if not path.is_file():
        raise SpecError("", f"{path}: no such checkpoint")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is reported the same way
        raise SpecError(
            "", f"{path}: not a readable checkpoint ({type(e).__name__}: {str(e).splitlines()[0]})"
        ) from None
    if not isinstance(ckpt, dict) or "spec" not in ckpt or "state_dict" not in ckpt:
        raise SpecError("", f"{path}: not a vspec checkpoint (needs 'spec' and 'state_dict' entries)")
    return ckpt


def load(path: str | Path) -> nn.Module:
    """Rebuild the model a vspec checkpoint describes and load its weights."""
    ckpt = load_checkpoint(path)
    model = build(from_json(ckpt["spec"]))
    model.load_state_dict(ckpt["state_dict"])
    return model
