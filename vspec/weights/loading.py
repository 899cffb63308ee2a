"""Reading a saved model, whatever holds it: a checkpoint file (vspec.weights.checkpoint) or a model folder
(vspec.weights.folder). The one place that tells the two apart, above both readers, so that neither imports
the other."""

from pathlib import Path
from typing import Any

from torch import nn

from ..spec import Model, from_json, to_json
from .checkpoint import CheckpointError, at_img_size, model_of, read_checkpoint, reading
from .folder import load_folder

__all__ = ["CheckpointError", "load", "load_checkpoint"]


def load_checkpoint(path: str | Path, fields: dict[str, tuple] | None = None,
                    formats: tuple[str, ...] | None = None, spec: Model | None = None) -> dict[str, Any]:
    """The checked checkpoint dict of a `.pt` file (`read_checkpoint`) or a model folder (`load_folder`; `spec`: that
    of a folder of weights alone); `fields` or `formats` ask for a training checkpoint, which no folder is.

    Args:
        path: a `.pt` checkpoint or a model folder.
        fields: the extra entries a training checkpoint must hold, each with its types; None: none.
        formats: the "format" values accepted; None: any.
        spec: the spec of a folder of weights alone; None: the folder's config.json.
    """
    path = Path(path)
    with reading(path):
        folder = path.is_dir()
    if folder and not (fields or formats):
        return load_folder(path, spec)
    return read_checkpoint(path, fields, formats)


def load(path: str | Path, img_size: int | tuple[int, int] | None = None) -> nn.Module:
    """Rebuild the model a vspec checkpoint (or model folder) describes and load its weights.

    Args:
        path: a `.pt` checkpoint (`vspec.save`'s, a training run's) or a model folder (`vspec.save_pretrained`'s).
        img_size: build the spec at this size instead, its weights resampled to it (`vspec.weights.resample`).

    Returns:
        The model with its weights, in eval mode as `from_pretrained` gives it (`.train()` to go on training).

    Raises:
        CheckpointError: a bad checkpoint, or a size the spec refuses: one line (a SpecError) naming the file.
    """
    ckpt = load_checkpoint(path)
    if img_size is not None:
        spec, weights = at_img_size(from_json(ckpt["spec"]), ckpt["state_dict"], img_size, path)
        ckpt = {**ckpt, "spec": to_json(spec), "state_dict": weights}
    return model_of(ckpt, path).eval()

