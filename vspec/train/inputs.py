"""The inputs of an image run (mean, std, interpolation, the validation crop): from the flags, else the published
weights' preprocessing (their `pretrained_cfg`, `vspec.spec.Preprocess`), else vspec's defaults."""

from .data import INTERPOLATION
from .data import _mean_std as mean_std


def resolve_inputs(given: dict, weights: dict | None, in_chans: int, crop_ratio: float | None = None) -> dict:
    """The inputs a run uses: mean, std, interpolation (and crop_pct where `crop_ratio` is the default crop) each
    from `given` (the flags, None where not given), else `weights` (published weights' data config: their
    `pretrained_cfg`), else the defaults (ImageNet's mean / std, bicubic); "from" says which set them."""
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
            out[key], src = weights[key], "the weights'"
        else:
            out[key], src = default, "default"
        origin.append(src)
    out["mean"], out["std"] = map(list, mean_std(in_chans, out["mean"], out["std"]))
    if "the weights'" in origin and "architecture" in weights:
        out["from"] = f"{weights['architecture']} ({weights.get('tag', '?')})'s preprocessing"
    else:
        out["from"] = "the weights' preprocessing" if "the weights'" in origin else "vspec's defaults"
    flags = sorted({s for s in origin if s.startswith("--")})
    if flags:
        out["from"] += f", {' '.join(flags)} given"
    return out


def inputs_line(inputs: dict) -> str:
    """One line saying how images are made ready (printed first by vspec eval and train)."""
    crop = f", crop {inputs['crop_pct']:g}" if "crop_pct" in inputs else ""
    mean, std = (" ".join(f"{v:g}" for v in inputs[k]) for k in ("mean", "std"))
    return (f"inputs: mean {mean}, std {std}"
            f"{crop}, {inputs['interpolation']} ({inputs['from']})")
