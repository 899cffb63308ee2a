"""Checkpoints that carry their spec: `{"format", "spec" (JSON text), "state_dict", "tensor_sha256"}`;
training checkpoints add "ema", optimizer state and so on (vspec.train.checkpoints). Those of earlier
releases are upgraded on load.

`load_checkpoint` is the one loader behind every consumer (`vspec.load`, tools/eval.py,
tools/train.py --resume): it reads with `weights_only=True` (no code in a file ever runs), checks the
checksum, validates the structure and upgrades the spec; every problem is a one-line CheckpointError
that names the file and the cause."""

import hashlib
import json
import re
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from .compiler import build
from .spec import Model, SpecError, from_dict, from_json, to_json
from .spec.migrate import state_key_upgrade, upgrade, version_of

FORMAT = "vspec-checkpoint-1"
CHECKSUM = "tensor_sha256"
# the fields every checkpoint has, and their types (None: the field may be None)
MODEL_FIELDS: dict[str, tuple] = {"spec": (str,), "state_dict": (dict,)}
OPTIONAL_FIELDS: dict[str, tuple] = {"format": (str,), "ema": (dict, type(None)), CHECKSUM: (str,)}


class CheckpointError(SpecError):
    """A checkpoint that cannot be used; the message is one line: `FILE: cause`."""

    def __init__(self, file: str | Path, message: str):
        super().__init__("", f"{file}: {message}")
        self.file = file


def cause(e: BaseException, limit: int = 160) -> str:
    """`Type: first line of the message` (the type alone when the message is empty), cut to `limit`."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    if "WeightsUnpickler error:" in text:  # torch's advice around it is no cause
        text = text.split("WeightsUnpickler error:", 1)[1].split(". ")[0]
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    out = f"{type(e).__name__}: {line}" if line else type(e).__name__
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _tensors(obj: Any, key: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in nested dicts / lists with its key path, in a deterministic order."""
    if isinstance(obj, torch.Tensor):
        yield key, obj
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            yield from _tensors(obj[k], f"{key}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{key}.{i}")


def tensor_checksum(obj: Any) -> str:
    """sha256 (hex) over the key path, dtype, shape and bytes of every tensor in `obj`."""
    h = hashlib.sha256()
    for key, t in _tensors(obj):
        h.update(f"{key}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def with_checksum(state: dict[str, Any]) -> dict[str, Any]:
    """`state` plus the checksum of its tensors, for saving."""
    return {**{k: v for k, v in state.items() if k != CHECKSUM}, CHECKSUM: tensor_checksum(state)}


def save(model: nn.Module, path: str | Path, spec: Model | None = None) -> Path:
    """Write `model`'s weights with its spec (default `model.spec`) as JSON, and their checksum."""
    spec = spec if spec is not None else model.spec
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(with_checksum({"format": FORMAT, "spec": to_json(spec), "state_dict": model.state_dict()}), path)
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


def _type_names(types: tuple) -> str:
    return " or ".join("None" if t is type(None) else t.__name__ for t in types)


def _a(name: str) -> str:
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def check_fields(ckpt: dict, fields: dict[str, tuple], file: str | Path, required: bool = True) -> None:
    """Each field present (when `required`) and of one of its types (an int is no bool)."""
    for name, types in fields.items():
        if name not in ckpt:
            if required:
                raise CheckpointError(file, f"the checkpoint has no '{name}' entry")
            continue
        value = ckpt[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise CheckpointError(file, f"the checkpoint's '{name}' is {_a(type(value).__name__)}, not "
                                        f"{_a(_type_names(types))}")


def read(path: str | Path) -> dict[str, Any]:
    """The raw checkpoint dict, read with weights_only=True, its checksum (when it has one) verified."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(path, "no such checkpoint" if not path.exists() else "not a file")
    if path.stat().st_size == 0:
        raise CheckpointError(path, "empty file, not a checkpoint")
    try:
        with warnings.catch_warnings():  # a foreign pickle's warnings are no second line of the error
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is reported the same way
        refused = "Unsupported global" in str(e)  # not a mere corrupt byte stream
        raise CheckpointError(path, "not a readable checkpoint (" + (
            f"holds what weights_only loading refuses, nothing of it was run: {cause(e)})" if refused else
            f"truncated, corrupt or not written by torch.save: {cause(e)})")) from None
    if not isinstance(ckpt, dict):
        raise CheckpointError(path, f"not a vspec checkpoint ({_a(type(ckpt).__name__)}, not a dict)")
    saved = ckpt.get(CHECKSUM)
    if saved is not None and (not isinstance(saved, str) or saved != tensor_checksum(ckpt)):
        raise CheckpointError(path, "checksum mismatch: its tensors are not the ones vspec wrote (a corrupt or "
                                    "edited file)")
    return ckpt


def load_checkpoint(path: str | Path, fields: dict[str, tuple] | None = None,
                    formats: tuple[str, ...] | None = None) -> dict:
    """The checkpoint dict, read and checked (see `read`), validated (the model fields, plus `fields` with
    their types; a "format" among `formats` when given) and upgraded to the current spec format."""
    ckpt = read(path)
    if "spec" not in ckpt and "state_dict" not in ckpt:
        raise CheckpointError(path, "not a vspec checkpoint (no 'spec' and 'state_dict' entries)")
    check_fields(ckpt, MODEL_FIELDS, path)
    check_fields(ckpt, OPTIONAL_FIELDS, path, required=False)
    if formats is not None and ckpt.get("format") not in formats:
        raise CheckpointError(path, f"format {ckpt.get('format')!r}, not {' or '.join(map(repr, formats))}")
    check_fields(ckpt, fields or {}, path)
    for name in ("state_dict", "ema"):
        weights = ckpt.get(name) or {}
        bad = next((k for k, v in weights.items() if not (isinstance(k, str) and isinstance(v, torch.Tensor))), None)
        if bad is not None:
            raise CheckpointError(path, f"the checkpoint's '{name}' maps {bad!r} to "
                                        f"{_a(type(weights[bad]).__name__)}, not a tensor")
    try:
        return migrate_checkpoint(ckpt)
    except SpecError as e:
        raise CheckpointError(path, str(e)) from None


def _few(keys: list[str], limit: int = 3) -> str:
    return ", ".join(keys[:limit]) + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def load_weights(module: nn.Module, weights: dict[str, torch.Tensor], file: str | Path, what: str = "weights") -> None:
    """module.load_state_dict(weights), or a CheckpointError listing (briefly) the missing, unexpected and
    misshapen keys."""
    own = module.state_dict()
    problems = []
    if missing := [k for k in own if k not in weights]:
        problems.append(f"missing {_few(missing)}")
    if unexpected := [k for k in weights if k not in own]:
        problems.append(f"unexpected {_few(unexpected)}")
    if shapes := [f"{k} {list(weights[k].shape)} (model {list(v.shape)})" for k, v in own.items()
                  if k in weights and weights[k].shape != v.shape]:
        problems.append(f"shape {_few(shapes, 2)}")
    if problems:
        raise CheckpointError(file, f"the {what} do not fit its spec: {'; '.join(problems)}")
    module.load_state_dict(weights)


def load(path: str | Path) -> nn.Module:
    """Rebuild the model a vspec checkpoint describes and load its weights; a bad checkpoint raises a
    one-line CheckpointError (a SpecError) naming the file."""
    ckpt = load_checkpoint(path)
    model = build(from_json(ckpt["spec"]))
    load_weights(model, ckpt["state_dict"], path)
    return model
