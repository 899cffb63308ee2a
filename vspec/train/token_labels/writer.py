"""Token-label maps from any classifier (`vspec label`): a teacher's dense class scores over a whole training
image, resampled to a fixed grid and cut to the top-k, in the released on-disk format that `maps.read_label_map`
reads (the fixtures' README, "On-disk label map": (2, k, Hm, Wm), plane 0 the scores, plane 1 their class indices
as floats).

The scores are logits: the classifier applied at every location of the model's last token grid (a vspec model's
dense auxiliary head where it has one, else its classifier on every patch token; a timm CNN's classifier as a 1x1
convolution, as LV-ViT used NFNet-F6; a timm ViT's on the patch tokens). The target builder softmaxes them after
pooling (README step 6).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Subset

from ...nn.model import Transformer
from ...nn.vit import GAPHead
from ..data.registry import DataError
from .maps import image_keys, label_path

__all__ = ["LabelError", "MIN_WIDTH", "label_maps", "pending", "resample", "save_map", "score_maps", "scorer", "top_k",
           "write_label_maps"]

# the crop plane the data set adds later stores 6 numbers along Wm (maps.read_label_map)
MIN_WIDTH = 6


class LabelError(DataError):
    """A model or a request that cannot make label maps (one line)."""


def _token_classifier(classifier: nn.Module, width: int, what: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """`classifier` as a function of channels-last features (..., width) -> logits (..., C): a Linear, or a 1x1
    convolution (its weights as a Linear's); anything else cannot score a token alone."""
    if isinstance(classifier, nn.Linear) and classifier.in_features == width:
        return classifier
    if isinstance(classifier, nn.Conv2d) and classifier.kernel_size == (1, 1) and classifier.in_channels == width \
            and classifier.groups == 1:
        return lambda x: F.linear(x, classifier.weight[:, :, 0, 0], classifier.bias)
    raise LabelError(f"{what}: its classifier ({type(classifier).__name__}) is not one Linear on the {width} features "
                     "of a token, so it cannot score every location (a head that pools or fuses several inputs)")


def _vspec_scorer(model) -> Callable[[torch.Tensor], torch.Tensor]:
    """A vspec model: the dense auxiliary head's logits per patch token, else the head's classifier on every patch
    token after the final norm (a GAP head's own norm too, as it normalises the pooled features)."""
    tokens = model.layout[-1].tokens
    if model.text or tokens.sequence:
        raise LabelError("the model reads text: token-label maps are for image models")
    if model.head_state:
        raise LabelError(f"the model's head reads more than the tokens ({', '.join(model.head_state)}): no "
                         "classifier scores a token alone")

    head = model.head
    dense = any(o.target == "tokens" for o in model.spec.head.outputs()) and isinstance(getattr(head, "aux", None),
                                                                                       nn.Linear)
    classifier = _token_classifier(head.aux if dense else model.get_classifier(), tokens.dim, "the vspec model")
    norm = head.norm if isinstance(head, GAPHead) else nn.Identity()
    h, w = tokens.grid

    def score(images: torch.Tensor) -> torch.Tensor:
        x = model.forward_features(images)[:, tokens.prefix:]  # (B, h·w, dim), raster order
        if x.shape[1] != h * w:
            raise LabelError(f"the model gave {x.shape[1]} patch tokens, its grid is {h}x{w}")
        logits = classifier(norm(x))  # (B, h·w, C)
        return logits.transpose(1, 2).reshape(len(x), -1, h, w)

    return score


def _timm_scorer(model) -> Callable[[torch.Tensor], torch.Tensor]:
    """A timm model: a CNN's classifier at every location of forward_features' (B, C, h, w) map (checked once to
    be global average pooling then that classifier); a ViT's on the patch tokens after `num_prefix_tokens`."""
    classifier = model.get_classifier()
    checked = []

    def score(images: torch.Tensor) -> torch.Tensor:
        feats = model.forward_features(images)
        if feats.dim() == 4:  # a CNN (or timm's NHWC models)
            nhwc = getattr(model, "output_fmt", "NCHW") == "NHWC"
            x = feats if nhwc else feats.permute(0, 2, 3, 1)
            fc = _token_classifier(classifier, x.shape[-1], type(model).__name__)
            logits = fc(x).permute(0, 3, 1, 2)  # (B, C, h, w)
            if not checked:  # linear, so the mean of the map is the pooled logits iff the head pools then classifies
                pooled = model.forward_head(feats)
                if pooled.shape != logits.shape[:2] or not torch.allclose(logits.mean((2, 3)), pooled, rtol=1e-3,
                                                                          atol=1e-4):
                    raise LabelError(f"{type(model).__name__}: its head is not global average pooling and one linear "
                                     "classifier, so its classifier cannot score every location")
                checked.append(True)
            return logits
        if feats.dim() != 3:
            raise LabelError(f"{type(model).__name__}: forward_features gives {tuple(feats.shape)}, not a token grid")
        x = feats[:, getattr(model, "num_prefix_tokens", 0):]
        fc = _token_classifier(classifier, x.shape[-1], type(model).__name__)
        grid = getattr(getattr(model, "patch_embed", None), "grid_size", None)
        n = x.shape[1]
        h, w = (tuple(grid) if grid and grid[0] * grid[1] == n else (round(n ** 0.5),) * 2)
        if h * w != n:
            raise LabelError(f"{type(model).__name__}: {n} patch tokens make no square grid")
        logits = fc(getattr(model, "fc_norm", nn.Identity())(x))
        return logits.transpose(1, 2).reshape(len(x), -1, h, w)

    return score


def scorer(model) -> Callable[[torch.Tensor], torch.Tensor]:
    """A function images (B, C, H, W) -> dense logits (B, classes, h, w) on the model's last token grid (a vspec
    model, or a timm model); a model that cannot score every token is a one-line LabelError.

    Args:
        model: the classifier (in eval mode when scored)."""

    return _vspec_scorer(model) if isinstance(model, Transformer) else _timm_scorer(model)


@torch.no_grad()
def score_maps(model, images: torch.Tensor) -> torch.Tensor:
    """Dense logits (B, classes, h, w) of `images` on the model's token grid (`scorer`), in eval mode.

    Args:
        model: the classifier.
        images: the batch (B, C, H, W)."""
    return scorer(model.eval())(images)


def resample(maps: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """(B, C, h, w) -> (B, C, *grid), each axis on its own: adaptive average pooling where the map is larger than
    the grid (the logits of a location are then those of its mean feature: the classifier is linear), bilinear
    (align_corners=False) where it is smaller; an axis of the grid's size is kept as it is.

    Args:
        maps: the logits (B, C, h, w).
        grid: the output's (Hm, Wm)."""
    gh, gw = grid
    h, w = maps.shape[-2:]
    if h > gh or w > gw:
        maps = F.adaptive_avg_pool2d(maps, (min(h, gh), min(w, gw)))
    if maps.shape[-2:] != (gh, gw):
        maps = F.interpolate(maps, size=(gh, gw), mode="bilinear", align_corners=False)
    return maps


def top_k(maps: torch.Tensor, k: int) -> torch.Tensor:
    """(B, C, Hm, Wm) scores -> (B, 2, k, Hm, Wm) label maps: the k best scores of each location, best first, and
    their (distinct) class indices as float32.

    Args:
        maps: the scores (B, C, Hm, Wm).
        k: the scores kept per location."""
    if not 1 <= k <= maps.shape[1]:
        raise LabelError(f"top-k {k}: the model has {maps.shape[1]} classes")
    values, indices = maps.float().topk(k, dim=1)
    return torch.stack((values, indices.float()), dim=1)


def label_maps(score: Callable, images: torch.Tensor, grid: tuple[int, int], k: int) -> torch.Tensor:
    """The (B, 2, k, *grid) label maps of a batch: `score`'s logits resampled to `grid`, then the top-k.

    Args:
        score: `scorer`'s function.
        images: the batch (B, C, H, W).
        grid: the maps' (Hm, Wm).
        k: the scores kept per location."""
    if grid[1] < MIN_WIDTH or grid[0] < 1:
        raise LabelError(f"grid {grid[0]}x{grid[1]}: the label maps' width must be >= {MIN_WIDTH} (the crop plane)")
    return top_k(resample(score(images).float(), grid), k)


def save_map(label_map: torch.Tensor, path: Path, partial: Path) -> None:
    """torch.save one (2, k, Hm, Wm) map to `path` atomically: written in the folder `partial` (on the same file
    system), then renamed, so a killed run never leaves a partial map under a map's name.

    Args:
        label_map: the map.
        path: its file.
        partial: the folder of temporary files."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".pt", dir=partial)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(label_map.contiguous().clone(), f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def pending(keys: list[str], out: Path, overwrite: bool = False) -> list[int]:
    """The indices of `keys` whose map is still to write (all with `overwrite`); two images whose maps would share
    a name (the released rule cuts at the first dot: `a.png` and `a.jpg`) are refused.

    Args:
        keys: the images' names (`image_keys`).
        out: the label folder.
        overwrite: write every map anew."""

    seen: dict[Path, str] = {}
    for key in keys:
        path = label_path(out, key)
        if path in seen:
            raise LabelError(f"{seen[path]} and {key} would both have the label map {path} (the name is cut at the "
                             "first dot): rename one")
        seen[path] = key
    return [i for i, path in enumerate(seen) if overwrite or not path.is_file()]


def write_label_maps(score: Callable, dataset, out: Path, *, grid: tuple[int, int], k: int, batch_size: int,
                     workers: int = 0, device: torch.device | str = "cpu", overwrite: bool = False,
                     limit: int | None = None, progress: Callable | None = None) -> tuple[int, int]:
    """Write the label map of every image of `dataset` (items (image tensor, label), in `image_keys` order) under
    `label_path(out, key)`, skipping those already there (`overwrite`: all anew); `limit`: at most that many this
    run. `progress(total)`: a `Progress` of the maps to write (updated per batch). Returns (written, skipped).

    Args:
        score: `scorer`'s function.
        dataset: the training images.
        out: the label folder.
        grid: the maps' (Hm, Wm).
        k: the scores kept per location.
        batch_size: images scored at once.
        workers: the loader's processes.
        device: where the images are scored.
        overwrite: write every map anew.
        limit: the most maps written this run, or None.
        progress: `progress(total)` makes the display of the maps to write, or None."""


    keys = image_keys(dataset)
    todo = pending(keys, out, overwrite)
    skipped = len(keys) - len(todo)
    todo = todo[:limit] if limit is not None else todo
    partial = out / ".partial"  # temporaries of an earlier, killed run: never a map's name, removed
    if partial.is_dir():
        for leftover in partial.iterdir():
            leftover.unlink()
    loader = DataLoader(Subset(dataset, todo), batch_size=batch_size, shuffle=False, num_workers=workers,
                        pin_memory=torch.device(device).type == "cuda")
    written, bar = 0, progress(len(todo)) if progress is not None and todo else None
    with torch.no_grad():
        for images, _ in loader:
            maps = label_maps(score, images.to(device, non_blocking=True), grid, k).cpu()
            for m in maps:
                key = keys[todo[written]]
                if not torch.isfinite(m[0]).all():  # a map of NaN would be skipped by every later run
                    raise LabelError(f"{label_path(out, key)}: not written: the model's scores of {key} are NaN or "
                                     "infinite (its weights or its inputs overflow float32)")
                save_map(m, label_path(out, key), partial)
                written += 1
            if bar is not None:
                bar.update(written)
    if bar is not None:
        bar.close()
    if partial.is_dir():
        partial.rmdir()
    return written, skipped
