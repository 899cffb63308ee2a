"""The preprocessing of an image run (mean, std, interpolation, the validation crop): from the flags, else the
published weights' (their `pretrained_cfg`, `vspec.spec.Preprocess`) or a training run's, else vspec's defaults
(`mean_std`, `INTERPOLATION`, `eval_crop_ratio`); and the pretrained_cfg of a model a run trained, for the model
folders it writes. Torch-free."""

from ..validators import ConfigError, check_normalisation
from .registry import DataError

__all__ = ["INTERPOLATION", "KEYS", "eval_crop_ratio", "inputs_line", "mean_std", "resolve_inputs", "resumed",
           "run_pretrained_cfg"]

KEYS = ("mean", "std", "interpolation", "crop_pct")

# Upsampling interpolation for every resize (DeiT / timm ViT default); published weights may name another.
INTERPOLATION = "bicubic"


def mean_std(in_chans: int, mean, std) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) of `in_chans` channels, each given or the default (ImageNet's for 3 channels, 0.5 otherwise),
    checked (one value per channel, each std > 0): a DataError otherwise.

    Args:
        in_chans: the image's channels.
        mean: the given mean, or None.
        std: the given std, or None."""
    from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD  # extra

    default_mean, default_std = (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD) if in_chans == 3 else ((0.5,), (0.5,))
    mean = tuple(float(m) for m in (default_mean if mean is None else mean))
    std = tuple(float(s) for s in (default_std if std is None else std))
    for name, v in (("mean", mean), ("std", std)):
        if len(v) != in_chans:
            raise DataError(f"{name}: expected {in_chans} values (one per channel), got {len(v)}")
    try:
        check_normalisation(mean, std)
    except ConfigError as e:
        raise DataError(str(e)) from e  # the cause names the field (resolve_inputs words it by flag)
    return mean, std


def eval_crop_ratio(random_resized_crop: bool) -> float:
    """The crop ratio that validates at the scale training saw: timm's 0.875 centre crop after random resized
    crops, 1 (the whole image, resized as the training images were) after a plain resize.

    Args:
        random_resized_crop: the run trained on random resized crops."""
    return 0.875 if random_resized_crop else 1.0


def resolve_inputs(given: dict, weights: dict | None, in_chans: int, crop_ratio: float | None = None,
                   label: str | None = None) -> dict:
    """The inputs a run uses: mean, std, interpolation (and crop_pct where `crop_ratio` is the default crop) each
    from `given` (the flags, None where not given), else `weights` (a data config: published weights'
    `pretrained_cfg`, or a training run's inputs; `label` names it), else the defaults (ImageNet's mean / std for
    3 channels, 0.5 for others; bicubic). "from" says which set them, "given" lists the flags' keys.

    Args:
        given: the flags' mean, std, interpolation (and crop_pct).
        weights: the weights' data config, or None.
        in_chans: the image's channels.
        crop_ratio: the default crop (`eval_crop_ratio`), or None (no crop_pct resolved).
        label: how the messages name `weights`, or None."""
    weights = weights or {}
    out, origin = {}, []
    defaults = {"mean": None, "std": None, "interpolation": INTERPOLATION, "crop_pct": crop_ratio}
    for key, default in defaults.items():
        if key == "crop_pct" and crop_ratio is None:
            continue
        if given.get(key) is not None:  # one value of --mean / --std serves every channel
            value = given[key]
            out[key] = list(value) * in_chans if key in ("mean", "std") and len(value) == 1 else value
            src = f"--{key.replace('_', '-')}"
        elif weights.get(key) is not None:
            out[key], src = weights[key], "weights"
        else:
            out[key], src = default, "default"
        origin.append(src)
    try:
        out["mean"], out["std"] = map(list, mean_std(in_chans, out["mean"], out["std"]))
    except DataError as e:  # named by the flags that gave the values
        cause = e.__cause__
        flags = [f"--{k}" for k in ("mean", "std") if isinstance(cause, ConfigError) and k in cause.field.split(" / ")
                 and given.get(k) is not None]
        if not flags:
            raise
        raise DataError(f"{' / '.join(flags)}: {cause.message}") from None
    if "weights" not in origin:
        out["from"] = "vspec's defaults"
    elif label is not None:
        out["from"] = label
    elif "architecture" in weights:
        out["from"] = f"{weights['architecture']} ({weights.get('tag', '?')})'s preprocessing"
    else:
        out["from"] = "the weights' preprocessing"
    out["given"] = sorted(k for k in KEYS if given.get(k) is not None and k in out)
    if out["given"]:
        out["from"] += f", {' '.join('--' + k.replace('_', '-') for k in out['given'])} given"
    return out


def resumed(saved: dict, now: dict | None) -> dict:
    """The inputs of a resumed run: the checkpoint's, each flag given now replacing its own key.

    Args:
        saved: the checkpoint's inputs.
        now: the inputs given now, or None."""
    now = now or {}
    given = [k for k in now.get("given", ()) if k in now]
    merged = {**saved, **{k: now[k] for k in given}}
    if given:
        base = saved.get("from", "the run's inputs").split(", --")[0]
        merged["from"] = f"{base}, {' '.join('--' + k.replace('_', '-') for k in given)} given"
        merged["given"] = sorted(set(saved.get("given", ())) | set(given))
    return merged


def run_pretrained_cfg(inputs: dict, spec, random_resized_crop: bool) -> dict:
    """timm's pretrained_cfg of a model a run trained (its model folders'): the run's mean, std and interpolation,
    the crop it validated with, its size and classes.

    Args:
        inputs: the run's inputs.
        spec: the spec trained.
        random_resized_crop: the run trained on random resized crops."""
    return {"input_size": (spec.in_chans, *spec.img_size), "interpolation": inputs["interpolation"],
            "mean": tuple(inputs["mean"]), "std": tuple(inputs["std"]),
            "crop_pct": eval_crop_ratio(random_resized_crop), "crop_mode": "center", "num_classes": spec.num_classes}


def inputs_line(inputs: dict) -> str:
    """One line saying how images are made ready (printed first by vspec eval and train).

    Args:
        inputs: what `resolve_inputs` returned."""
    crop = f", crop {inputs['crop_pct']:g}" if "crop_pct" in inputs else ""
    mean, std = (" ".join(f"{v:g}" for v in inputs[k]) for k in ("mean", "std"))
    return (f"inputs: mean {mean}, std {std}"
            f"{crop}, {inputs['interpolation']} ({inputs['from']})")
