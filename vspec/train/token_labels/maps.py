"""Token labeling, Refiner's "advanced recipe" (its Table 8, taken from LV-ViT): the dense label maps a teacher
wrote for every training image, their names and files, and the per-token targets built from them (`vspec train
--token-labels`); the released losses they take are vspec/nn/token_losses.py's.

The conventions are those of the release (github.com/zhoudaquan/Refiner_ViT @ b3e8cb0) as the fixtures' README
describes them ("Token labeling"); "step N" below is that README's step of
the target builder. Differences from the release, on purpose: the target builder never rewrites its input; by
default it pools the crop's own region (the release pools the transposed crop, `released_alignment=True`
reproduces it); inputs on which the released losses crash are refused with a message.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePath

import torch

from ...spec import layout
from ..data.hf import hub_id
from ..data.registry import DataError, open_regular

__all__ = ["LABELS_JSON", "MAX_RECORD", "crop_boxes", "data_place", "dense_scores", "image_keys", "label_path", "pool",
           "read_label_map", "read_record", "relabel_target", "token_grid"]


def label_path(relabel_root, image_rel_path) -> Path:
    """The label map of the image `<class_dir>/<file>` (relative to the train folder): the released naming rule
    cuts that string at its FIRST dot, so `cls_b/b.001.png` -> `<relabel_root>/cls_b/b.pt`.

    Args:
        relabel_root: the label folder.
        image_rel_path: the image's name (`image_keys`)."""
    rel = PurePath(image_rel_path)
    if rel.is_absolute() or ".." in rel.parts:
        raise DataError(f"label_path wants the image's path relative to the train folder, got {image_rel_path}")
    return Path(relabel_root) / (rel.as_posix().split(".", 1)[0] + ".pt")


def image_keys(dataset) -> list[str]:
    """Each training image's name relative to the train folder, in the data set's order: the file's path for a
    folder of files (torchvision's ImageFolder: `<class_dir>/<file>`); for images without files (mnist5k,
    digits, synthetic, --data hf: `targets` and an index, an HF split's row) `<class>/<index:07d>`. `label_path`
    maps a name to its label map; `vspec label` writes, and the token-labeling data set reads, maps under these
    names.

    Args:
        dataset: the training set."""
    if hasattr(dataset, "samples") and hasattr(dataset, "root"):
        root = Path(dataset.root)
        return [Path(path).relative_to(root).as_posix() for path, _ in dataset.samples]
    targets = getattr(dataset, "targets", None)
    if targets is None:
        raise DataError(f"token labels: cannot name the images of a {type(dataset).__name__} (no files, no targets)")
    return [f"{int(t)}/{i:07d}" for i, t in enumerate(targets)]


def data_place(data_dir) -> str | None:
    """A --data-dir as labels.json records it: a local path resolved (the same from any working folder), a Hub
    dataset's id (--data hf) as given.

    Args:
        data_dir: --data-dir, or None."""
    if data_dir is None:
        return None
    return str(data_dir) if hub_id(str(data_dir)) else str(Path(data_dir).resolve())


LABELS_JSON = "labels.json"  # what `vspec label` records beside its maps (the released folders have none)
MAX_RECORD = 2**20  # bytes of labels.json read at most (vspec label's is a few hundred)


def read_record(root) -> dict | None:
    """A label folder's labels.json (the labeling and the data set `vspec label` made its maps of), None where
    there is none; one DataError line naming it where it is no small JSON object (a FIFO, /dev/zero, not JSON,
    nested too deep, more than MAX_RECORD bytes).

    Args:
        root: the label folder."""
    path = Path(root) / LABELS_JSON
    try:
        with open_regular(path, "a labels.json file") as f:
            raw = f.read(MAX_RECORD + 1)
    except FileNotFoundError:
        return None
    except OSError as e:  # a read error (/proc's EIO)
        raise DataError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    if len(raw) > MAX_RECORD:
        raise DataError(f"{path}: more than the {MAX_RECORD:,} bytes a labels.json of vspec label has")
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, or an int beyond Python's 4300 digits
        raise DataError(f"{path}: not JSON ({e})") from None
    except RecursionError:
        raise DataError(f"{path}: not the JSON of vspec label: nested too deep") from None
    if not isinstance(record, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(record), "a number")
        raise DataError(f"{path}: not a JSON object ({kind}), as vspec label writes")
    return record


def read_label_map(path) -> torch.Tensor:
    """One on-disk label map: a (2, k, Hm, Wm) tensor, plane 0 the top-k teacher scores, plane 1 their class
    indices (stored as floats), any dtype -> float32. Wm >= 6: the crop plane added later uses 6 entries.

    Args:
        path: the map's file."""
    try:
        with open_regular(path, "a label map file") as f:
            data = torch.load(f, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise DataError(f"{path}: no label map (token labeling reads one per training image)") from None
    except DataError:
        raise
    except Exception as e:  # a corrupt file raises whatever the unpickler or zip reader met
        raise DataError(f"{path}: not a readable label map ({type(e).__name__}: {e})") from None
    if not isinstance(data, torch.Tensor):
        raise DataError(f"{path}: a label map is one tensor, got {type(data).__name__}")
    if data.dim() != 4 or data.shape[0] != 2 or data.shape[3] < 6 or 0 in data.shape:
        raise DataError(f"{path}: a label map is (2, k, Hm, Wm) with Wm >= 6, got {tuple(data.shape)}")
    data = data.float()
    if not torch.isfinite(data[0]).all():
        raise DataError(f"{path}: the label map's scores hold NaN or infinite values (its teacher's logits "
                        "overflowed: label the image again)")
    return data


def _check_batch(batch: torch.Tensor, num_classes: int, values: bool = True) -> None:
    if batch.dim() != 5 or batch.shape[1] != 3 or batch.shape[4] < 6:
        raise ValueError(f"relabel targets want (B, 3, k, Hm, Wm) label maps with Wm >= 6 (scores, class indices, "
                         f"crop plane), got {tuple(batch.shape)}")
    if not values:
        return
    idx, cls = batch[:, 1], batch[:, 2, 0, 0, 5]
    for name, v in (("class index", idx), ("image class", cls)):
        if not ((v >= 0) & (v < num_classes) & (v == v.round())).all():
            raise ValueError(f"relabel targets: a {name} is not an integer in [0, {num_classes})")
    if batch.shape[2] > 1 and (idx.sort(dim=1).values.diff(dim=1) == 0).any():
        raise ValueError("relabel targets: a label map repeats a class index at one location (the top-k indices "
                         "of a location must be distinct)")


def dense_scores(batch: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Step 3: (B, C, Hm, Wm) zeros with each location's k scores written at their class indices (a class outside
    the top-k scores 0, not -inf).

    Args:
        batch: the maps (B, 2, k, Hm, Wm) (or with their crop plane).
        num_classes: C."""
    b, _, _, hm, wm = batch.shape
    return batch.new_zeros(b, num_classes, hm, wm, dtype=torch.float32).scatter_(1, batch[:, 1].long(),
                                                                          batch[:, 0].float())


def crop_boxes(coords: torch.Tensor, hm: int, wm: int, released: bool = False) -> torch.Tensor:
    """roi_align's (index, x1, y1, x2, y2) boxes, x along the map's last axis, in cells, the -0.5 putting cell
    centres on integers (aligned=False). coords: (B, 4) = (top, left, height, width) fractions (step 4).

    Args:
        coords: the crops' fractions (B, 4).
        hm: the maps' height.
        wm: the maps' width.
        released: the release's transposed box (its step 5), else rows along y and columns along x."""
    top, left, h, w = coords.unbind(1)
    index = torch.arange(len(coords), dtype=coords.dtype, device=coords.device)
    if released:  # step 5's transposed box: vertical range along x, all four scaled by Wm
        corners = (top * wm, left * wm, (top + h) * wm, (left + w) * wm)
    else:  # columns (left, width) along x scaled by Wm, rows (top, height) along y scaled by Hm
        corners = (left * wm, top * hm, (left + w) * wm, (top + h) * hm)
    return torch.stack([index, *(c - 0.5 for c in corners)], dim=1)


def pool(dense: torch.Tensor, boxes: torch.Tensor, size: int) -> torch.Tensor:
    """Step 5: torchvision's roi_align of the dense scores over the boxes to (B, C, size, size), with the
    release's defaults (spatial_scale 1, adaptive sampling_ratio -1, aligned=False).

    Args:
        dense: `dense_scores`' (B, C, Hm, Wm).
        boxes: `crop_boxes`' (B, 5).
        size: the output's side."""
    from torchvision.ops import roi_align  # extra

    return roi_align(dense, boxes, output_size=(size, size), spatial_scale=1.0, sampling_ratio=-1, aligned=False)


def relabel_target(batch: torch.Tensor, num_classes: int, *, lam: float = 1.0, smoothing: float = 0.1,
                   label_size: int = 1, released_alignment: bool = False, check: bool = True) -> torch.Tensor:
    """Token-labeling targets from a batch of transformed label maps (B, 3, k, Hm, Wm) (plane 2: the crop's
    (top, left, height, width) fractions at [2, 0, 0, 0:4], the image class at [2, 0, 0, 5]).

    Returns (B, C, 2 + S²) for S = label_size > 1: column 0 the smoothed ground truth, column 1 the class-token
    target (the crop pooled to 1 x 1), columns 2.. the S x S token targets row-major; (B, C, 2) for S = 1.
    Pooled scores are softmaxed over classes then smoothed (`p·on + off`: a row sums to 1 + smoothing / C, as
    released), and the batch is mixed with its flip by `lam` (step 8). The input is left untouched. `check`: refuse
    class indices outside [0, C) or repeated at a location (reading the batch back; False where each map was
    checked as it was read: `TokenLabels`, so the training step reads nothing back from the device).

    Args:
        batch: the transformed label maps (B, 3, k, Hm, Wm).
        num_classes: C.
        lam: the mixing weight of the batch against its flip (1: no mixing).
        smoothing: the label smoothing.
        label_size: S, the token grid's side.
        released_alignment: the release's crop boxes (`crop_boxes`' `released`).
        check: refuse bad class indices (reads the batch back)."""
    _check_batch(batch, num_classes, check)
    if label_size < 1:
        raise ValueError(f"label_size must be >= 1, got {label_size}")
    b, _, _, hm, wm = batch.shape
    batch = batch.float()
    off = smoothing / num_classes  # step 1
    on = 1.0 - smoothing + off
    classes = batch[:, 2, 0, 0, 5].long()  # step 2
    truth = torch.full((b, num_classes), off, device=batch.device).scatter_(1, classes[:, None], on)
    dense = dense_scores(batch, num_classes)
    boxes = crop_boxes(batch[:, 2, 0, 0, :4], hm, wm, released_alignment)

    def pooled(size: int) -> torch.Tensor:  # (B, C, size²), step 6's softmax over the class axis
        return pool(dense, boxes, size).flatten(2).softmax(dim=1) * on + off

    columns = [truth[:, :, None], pooled(1)] + ([pooled(label_size)] if label_size > 1 else [])  # step 7
    out = torch.cat(columns, dim=2)
    return out * lam + out.flip(0) * (1.0 - lam) if lam != 1.0 else out  # step 8: sample b with B - 1 - b


def token_grid(spec) -> int:
    """The side S of the square token grid a token-label target covers (S x S token targets): the spec's last
    stage's grid, under a class-token head with the dense auxiliary head.

    Args:
        spec: the model's spec."""
    if not any(o.target == "tokens" for o in spec.head.outputs()):
        raise ValueError(f"--token-labels: the spec's head ({spec.head.kind}) has no dense auxiliary head to train "
                         f"on them (ClassTokenHead(dense=DenseAux()), as Refined-ViT's and LV-ViT's)")
    h, w = layout(spec)[-1].tokens.grid
    if h != w:
        raise ValueError(f"--token-labels: the token grid is {h} x {w}; the released targets are square")
    return h
