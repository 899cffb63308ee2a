"""Training checkpoints, `last.pt`'s one owner: what it holds beside the model (RNG states that survive
`weights_only=True` loading, the counters, the metrics history, the data arguments, what the task adds), its writer
(`save`, vspec/train/files.py's atomic write into the run folder, vspec/train/run_folder.py), its reader (`load`:
vspec.weights.checkpoint's `read_checkpoint`, with the training fields, each record checked for the keys its task
names), the checks of a resume and the restore of a run's states."""

import json
import random
import re
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch

from .._moved import moved as _moved
from ..spec import from_json, to_json
from ..spec.errors import cut
from ..version import __version__
from ..weights.checkpoint import CheckpointError, cause, check_fields, load_weights, read_checkpoint, with_checksum
from . import files
from .config import PRECISIONS
from .data.hf import hub_id
from .data.registry import entry

__all__ = ["FORMAT", "RECORD_KEYS", "TEXT_RECORD_KEYS", "adamw_kernel", "check_resume", "data_args",
           "load", "restore", "rng_state", "save", "saved_tokenizer", "seed_everything", "set_rng_state"]

FORMAT = "vspec-train-1"


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states as tensors / plain values (loadable with weights_only)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _rng_parts(state: dict[str, Any]) -> tuple[tuple, tuple, torch.Tensor, Any]:
    """The Python, numpy and torch states as their setters take them, and the CUDA states (or None)."""
    version, internal, gauss = state["python"]
    n = state["numpy"]
    numpy_state = (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"])
    return (version, tuple(internal), gauss), numpy_state, state["torch"], state.get("cuda")


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back the Python, numpy, torch (and CUDA, where saved and available) RNG states `rng_state` saved.

    Args:
        state: what `rng_state` returned (read back from a checkpoint)."""
    python, numpy_state, torch_state, cuda = _rng_parts(state)
    random.setstate(python)
    np.random.set_state(numpy_state)
    torch.set_rng_state(torch_state)
    if cuda is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def _check_rng_state(state: dict[str, Any], file: Path) -> None:
    """Refuse RNG states that set_rng_state would fail on: each is set on a scratch generator.

    Args:
        state: the checkpoint's "rng".
        file: the checkpoint (named in the error line)."""
    try:
        python, numpy_state, torch_state, cuda = _rng_parts(state)
        random.Random().setstate(python)
        np.random.RandomState().set_state(numpy_state)
        torch.Generator().set_state(torch_state)
        if cuda is not None and not (isinstance(cuda, (list, tuple)) and all(
                isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda)):
            raise TypeError("'cuda' is not a list of byte tensors")
    except Exception as e:  # noqa: BLE001 - whatever the setters raise on a foreign state
        raise CheckpointError(file, f"the checkpoint's 'rng' is not the RNG states vspec saves ({cause(e)})") \
            from None


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's (the seed mod 2**32) and torch's RNGs.

    Args:
        seed: the run's seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# what a training checkpoint holds beside the model fields (see vspec.checkpoint), and the types
FIELDS: dict[str, tuple] = {"optimizer": (dict,), "scheduler": (dict,), "scaler": (dict,), "epoch": (int,),
                            "batches_done": (int,), "global_step": (int,), "rng": (dict,), "metrics": (list,)}
# "best_score": the best epoch's score (top-1, or a text task's headline metric), "best_top1" before it was named
# for every task; one of the two
OPTIONAL_FIELDS: dict[str, tuple] = {"data": (str,), "data_args": (dict,), "recipe": (dict,), "best_epoch": (int,),
                                     "epoch_loss": (list, tuple), "tokenizer": (dict,), "best_score": (float, int),
                                     "best_top1": (float, int), "precision": (str,)}
# what every record of an image task's "metrics" holds (`ImageTask.record_keys`; the curves and metrics.jsonl are
# drawn from them)
RECORD_KEYS = ("epoch", "train_loss", "val_loss", "val_top1", "val_top5")
# a text task's records (`TextTask.record_keys`; its metrics are its own, vspec/train/text/metrics.py): the keys
# every task's records hold
TEXT_RECORD_KEYS = ("epoch", "train_loss", "val_loss")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_run_fields(ckpt: dict[str, Any], path: Path, task_type=None) -> None:
    """The fields a resume reads beside the model's: counters, RNG states, the part-done epoch's loss, the
    metrics history (each record with the keys of the task its spec trains: `task_type(spec).record_keys`; without
    `task_type`, those every task's hold) and the data arguments."""
    for name in ("epoch", "batches_done", "global_step", "best_epoch"):
        if ckpt.get(name, 0) < 0:
            raise CheckpointError(path, f"the checkpoint's '{name}' is negative ({ckpt[name]})")
    rng = ckpt["rng"]
    if not (isinstance(rng.get("torch"), torch.Tensor) and isinstance(rng.get("numpy"), dict)
            and isinstance(rng.get("python"), (tuple, list)) and len(rng["python"]) == 3):
        raise CheckpointError(path, "the checkpoint's 'rng' is not the RNG states vspec saves")
    _check_rng_state(rng, path)
    loss = ckpt.get("epoch_loss", (0.0, 0))
    if not (len(loss) == 2 and _number(loss[0]) and isinstance(loss[1], int) and not isinstance(loss[1], bool)
            and loss[1] >= 0):
        raise CheckpointError(path, "the checkpoint's 'epoch_loss' is not [sum of the losses, count] of its "
                                    f"part-done epoch: {_brief(loss)}")
    keys = task_type(from_json(ckpt["spec"])).record_keys if task_type is not None else TEXT_RECORD_KEYS
    for i, record in enumerate(ckpt["metrics"]):
        if not (isinstance(record, dict) and all(isinstance(k, str) and _number(v) for k, v in record.items())
                and all(k in record for k in keys)):
            raise CheckpointError(path, f"the checkpoint's 'metrics' record {i} is not a table of numbers with "
                                        f"{', '.join(keys)}: {_brief(record)}")
    if ckpt.get("precision", "fp32") not in PRECISIONS[1:]:  # what a run trains in (not auto)
        raise CheckpointError(path, f"the checkpoint's 'precision' is {_brief(ckpt['precision'])}, not one of "
                                    f"{', '.join(PRECISIONS[1:])}")
    saved_tokenizer(ckpt, path)
    bad = next((k for k, v in (ckpt.get("data_args") or {}).items()
                if not (isinstance(k, str) and (v is None or isinstance(v, (str, int, float))))), None)
    if bad is not None:
        raise CheckpointError(path, f"the checkpoint's 'data_args' {_brief(bad)} is "
                                    f"{type(ckpt['data_args'][bad]).__name__}, not a flag's value")


def saved_tokenizer(ckpt: dict[str, Any], path: Path) -> dict[str, str] | None:
    """A text run's checkpoint's "tokenizer": the sha256 of each of its tokenizer's files, by name (None: not a
    text run's, or from before the field).

    Args:
        ckpt: the checkpoint.
        path: its file (named in an error line)."""
    saved = ckpt.get("tokenizer")
    if saved is not None and not (isinstance(saved, dict) and all(
            isinstance(k, str) and isinstance(v, str) and re.fullmatch("[0-9a-f]{64}", v) for k, v in saved.items())):
        raise CheckpointError(path, "the checkpoint's 'tokenizer' is not the sha256 of each tokenizer file by name")
    return saved


_SHORT = 40  # characters of a value from a checkpoint shown in a refusal


def _brief(value: Any) -> str:
    """A short repr of a value from a file (containers by type and length: they may hold themselves)."""
    if isinstance(value, (dict, list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    return cut(repr(value) if not isinstance(value, int) or value.bit_length() < 64 else "a big int", _SHORT, "fit")


def load(path: Path, task_type=None) -> dict[str, Any]:
    """A training checkpoint, read, validated and upgraded by vspec.checkpoint's loader; errors are one-line
    CheckpointErrors naming the file. `task_type(spec)`: the task a spec trains (`vspec.train.tasks.task_type`),
    asked for the keys its records hold (without it: those every task's records hold).

    Args:
        path: the checkpoint's file.
        task_type: spec -> its task's type, or None."""
    ckpt = read_checkpoint(path, FIELDS, formats=(FORMAT,))
    check_fields(ckpt, OPTIONAL_FIELDS, path, required=False)
    if "best_score" not in ckpt:  # an earlier release's name
        if "best_top1" not in ckpt:
            raise CheckpointError(path, "the checkpoint has no 'best_score' entry")
        ckpt["best_score"] = ckpt.pop("best_top1")
    _check_run_fields(ckpt, path, task_type)
    return ckpt


def save(path: Path, *, spec, task, model, ema, optimizer, scheduler, scaler, epoch: int, batches_done: int,
         global_step: int, metrics: list[dict[str, Any]], best_score: float, best_epoch: int, recipe,
         data_args: dict[str, Any], epoch_loss: tuple[float, int] = (0.0, 0), precision: str = "fp32") -> None:
    """Write a run's `last.pt` atomically, with its checksum: its spec, weights (and the EMA's), the optimizer's,
    schedule's and scaler's states, the counters (`batches_done` of the part-done epoch `epoch`), the RNG states,
    the metrics history and the best score, `epoch_loss` (sum, count) of a part-done epoch, the recipe, the data
    arguments (`data_args`), the precision (a resumed run keeps it) and what the task adds (`task.state()`).

    Args:
        path: the file written (OUT/last.pt).
        spec: the spec trained.
        task: the run's task.
        model: the model (its state_dict).
        ema: the EMA model, or None.
        optimizer: the optimizer.
        scheduler: the learning-rate schedule.
        scaler: fp16's grad scaler, or None.
        epoch: the epoch (from 0) the counters are in.
        batches_done: its batches done.
        global_step: the optimizer steps so far.
        metrics: the epochs' records.
        best_score: the best score so far.
        best_epoch: its epoch.
        recipe: the run's Recipe.
        data_args: `data_args(cfg)`.
        epoch_loss: (sum, count) of the part-done epoch's losses.
        precision: the run's precision (fp32, bf16 or fp16)."""
    state = {"format": FORMAT, "vspec_version": __version__, "spec": to_json(spec), "state_dict": model.state_dict(),
             "ema": ema.module.state_dict() if ema is not None else None,
             "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
             "epoch": epoch, "batches_done": batches_done, "global_step": global_step, "rng": rng_state(),
             "metrics": metrics, "best_score": best_score, "best_epoch": best_epoch, "epoch_loss": list(epoch_loss),
             "recipe": attrs.asdict(recipe), "data": data_args["data"], "data_args": data_args, "precision": precision,
             **task.state()}
    files.atomic_save(with_checksum(state), path)


def data_args(cfg) -> dict[str, Any]:
    """What decides a run's data: the data set, the seed and the options its entry names (`DataSet.decides`; paths
    made absolute, a Hub dataset's id kept, --text-columns as written): stored in training checkpoints, compared on
    --resume.

    Args:
        cfg: the run's TrainConfig."""
    args = {"data": cfg.data.name, "seed": cfg.run.seed}
    for option in entry(cfg.data.name).decides:
        value = getattr(cfg.data if hasattr(cfg.data, option) else cfg.run, option)
        hub = option == "data_dir" and cfg.data.name == "hf" and hub_id(value)  # --data hf's Hub id: no path
        path = value and option in ("data_dir", "tokenizer") and not hub
        args[option] = str(Path(value).resolve()) if path else ",".join(value) if isinstance(value, tuple) else value
    if getattr(cfg.data, "token_labels", None):  # recorded only when used: earlier checkpoints compare as before
        args["token_labels"] = str(Path(cfg.data.token_labels).resolve())
    if getattr(cfg.data, "streaming", False):  # a stream's order depends on its workers (hf_stream.py)
        args["workers"] = cfg.run.workers
    return args


def _flat(value: Any, key: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for name, sub in value.items() for k, v in _flat(sub, f"{key}.{name}" if key else name).items()}
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):  # stages, not img_size
        return {k: v for i, sub in enumerate(value) for k, v in _flat(sub, f"{key}.{i}").items()}
    return {key: value}


_ABSENT = object()


def _show(value: Any) -> str:
    """A run's value as `check_resume` lists it: a string as written, else its JSON; "(none)" where it is absent."""
    return cut("(none)" if value is _ABSENT else value if isinstance(value, str) else json.dumps(value), _SHORT, "fit")


def _run_view(spec_json: str, data: dict[str, Any]) -> dict[str, Any]:
    """A run as flat `key: value` pairs: spec fields as --set keys, data arguments as flags."""
    flags = {f"--{k.replace('_', '-')}": v for k, v in data.items() if v is not None or k == "data_dir"}
    return {**_flat(json.loads(spec_json)), **flags}


def check_resume(ckpt: dict[str, Any], file: Path, spec, data: dict[str, Any], precision: str = "auto") -> None:
    """Refuse to resume from `ckpt` a run whose spec, data (`data_args`) or --precision (other than auto, which keeps
    the checkpoint's) differ from the checkpoint's, listing the differences (this run != the checkpoint) in one
    line. Checkpoints that predate `data_args` are compared on their "data" alone, those without "precision" on
    neither. `spec` is the run's spec before its num_classes follows the dataset, so num_classes is compared only
    for synthetic data (otherwise the dataset decides it, compared as data).

    Args:
        ckpt: the checkpoint resumed from.
        file: its file (named in the error line).
        spec: the run's spec.
        data: this run's `data_args`.
        precision: this run's --precision (auto, fp32, bf16 or fp16)."""
    saved = _run_view(ckpt["spec"], ckpt.get("data_args") or {"data": ckpt.get("data")})
    now = _run_view(to_json(spec), data)
    if precision != "auto" and ckpt.get("precision") is not None:
        saved["--precision"], now["--precision"] = ckpt["precision"], precision
    if data["data"] != "synthetic" and "num_classes" in saved:
        now["num_classes"] = saved["num_classes"]
    now = {k: v for k, v in now.items() if not k.startswith("--") or k in saved}  # what the checkpoint records
    diffs = [f"{k} {_show(now.get(k, _ABSENT))} != {_show(saved.get(k, _ABSENT))}" for k in {**now, **saved}
             if now.get(k, _ABSENT) != saved.get(k, _ABSENT)]
    if diffs:
        shown = ", ".join(diffs[:6]) + (f" and {len(diffs) - 6} more" if len(diffs) > 6 else "")
        raise CheckpointError(file, f"--resume of a different run (this run != the checkpoint): {shown}; resume "
                                    "with the checkpoint's spec, data and precision flags, or train into a new --out")


def restore(ckpt: dict[str, Any], file: Path, model, optimizer, scheduler, scaler, ema) -> None:
    """Load a training checkpoint's states into the run's objects; what does not fit is a CheckpointError.

    Args:
        ckpt: the checkpoint.
        file: its file (named in the error line).
        model: the run's model.
        optimizer: its optimizer.
        scheduler: its schedule.
        scaler: its grad scaler, or None.
        ema: its EMA model, or None."""
    load_weights(model, ckpt["state_dict"], file)
    if ema is not None and ckpt.get("ema") is not None:
        load_weights(ema.module, ckpt["ema"], file, "EMA weights")
    try:
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        scaler.load_state_dict(ckpt["scaler"])
    except Exception as e:  # noqa: BLE001 - torch and timm raise anything on a foreign state
        raise CheckpointError(file, f"its optimizer / scheduler / scaler state does not fit this run ({cause(e)})") \
            from None
    for group in optimizer.param_groups:
        for p in group["params"]:
            for name, v in optimizer.state.get(p, {}).items():
                if isinstance(v, torch.Tensor) and v.dim() and v.shape != p.shape:
                    raise CheckpointError(file, f"its optimizer state '{name}' has shape {list(v.shape)} for a "
                                                f"parameter of shape {list(p.shape)}")


def adamw_kernel(optimizer, fused: bool) -> None:
    """AdamW's kernel set to `fused` or foreach after a checkpoint's state was loaded (torch keeps the saved groups'
    choice): a fused update keeps each parameter's step count on the parameter's device, foreach on the host.

    Args:
        optimizer: the run's AdamW.
        fused: use the fused kernel."""
    for group in optimizer.param_groups:
        group["fused"], group["foreach"] = (True if fused else None), None
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            if isinstance(state.get("step"), torch.Tensor):
                state["step"] = state["step"].to(p.device if fused else "cpu", torch.float32)


def __getattr__(name: str):  # the names that went to files.py, faults.py, run_folder.py (vspec/_moved.py)
    return _moved(__name__, name)
