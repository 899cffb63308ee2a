"""Checkpoints that carry their spec: `{"format", "spec" (JSON text), "state_dict"}`; training
checkpoints add "ema", optimizer state and so on. Those of earlier releases are upgraded on load."""

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .compiler import build
from .spec import Model, SpecError, from_dict, from_json, to_json
from .spec.migrate import state_key_upgrade, upgrade, version_of

FORMAT = "vspec-checkpoint-1"


def save(model: nn.Module, path: str | Path, spec: Model | None = None) -> Path:
    """Write `model`'s weights with its spec (default `model.spec`) as JSON."""
    spec = spec if spec is not None else model.spec
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": FORMAT, "spec": to_json(spec), "state_dict": model.state_dict()}, path)
    return path


def migrate_checkpoint(ckpt: dict[str, Any]) -> dict[str, Any]:
    """A copy of the checkpoint with its spec in the current format version and its state dicts
    ("state_dict", "ema") keyed as the current modules are (unchanged for a current checkpoint). An
    upgrade that dropped weights lists their key prefixes under "dropped": an optimizer state saved
    beside them no longer fits the model."""
    try:
        data = json.loads(ckpt["spec"])
    except (TypeError, json.JSONDecodeError) as e:
        raise SpecError("", f"the checkpoint's spec is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise SpecError("", "the checkpoint's spec is not a JSON table")
    version = version_of(data)
    new, dropped = upgrade(data)
    rename = state_key_upgrade(version, dropped)
    out = {**ckpt, "spec": to_json(from_dict(new)), "dropped": dropped}
    for name in ("state_dict", "ema"):
        if isinstance(ckpt.get(name), dict):
            out[name] = {new_key: value for key, value in ckpt[name].items()
                         if (new_key := rename(key)) is not None}
    return out


def load_checkpoint(path: str | Path) -> dict:
    """The checkpoint dict, read with weights_only=True and upgraded to the current format; errors are
    one-line SpecErrors."""
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
    try:
        return migrate_checkpoint(ckpt)
    except SpecError as e:
        raise SpecError("", f"{path}: {e}") from None


def load(path: str | Path) -> nn.Module:
    """Rebuild the model a vspec checkpoint describes and load its weights."""
    ckpt = load_checkpoint(path)
    model = build(from_json(ckpt["spec"]))
    model.load_state_dict(ckpt["state_dict"])
    return model
