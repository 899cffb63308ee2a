"""Token labeling, Refiner's "advanced recipe" (its Table 8, taken from LV-ViT): the dense label maps a teacher
wrote for every training image, the per-token targets built from them, and the released losses. Library part only
(issue 46): `vspec train` does not use it yet.

The conventions are those of the release (github.com/zhoudaquan/Refiner_ViT @ b3e8cb0) as the fixtures' README
describes them (../shared/fixtures/official/README.md, "Token labeling"); "step N" below is that README's step of
the target builder. Differences from the release, on purpose: the target builder never rewrites its input; by
default it pools the crop's own region (the release pools the transposed crop, `released_alignment=True`
reproduces it); inputs on which the released losses crash are refused with a message.
"""

from __future__ import annotations

from pathlib import Path, PurePath

import torch
import torch.nn.functional as F

from .datasets import DataError

# the released yamls' cos_reg_component: the cos term compares maps i and i + 1 for i < n_comn
N_COMN = 12


def label_path(relabel_root, image_rel_path) -> Path:
    """The label map of the image `<class_dir>/<file>` (relative to the train folder): the released naming rule
    cuts that string at its FIRST dot, so `cls_b/b.001.png` -> `<relabel_root>/cls_b/b.pt`."""
    rel = PurePath(image_rel_path)
    if rel.is_absolute() or ".." in rel.parts:
        raise DataError(f"label_path wants the image's path relative to the train folder, got {image_rel_path}")
    return Path(relabel_root) / (rel.as_posix().split(".", 1)[0] + ".pt")


def image_keys(dataset) -> list[str]:
    """Each training image's name relative to the train folder, in the data set's order: the file's path for a
    folder of files (torchvision's ImageFolder: `<class_dir>/<file>`); for images without files (mnist5k,
    digits, synthetic: `targets` and an index) `<class>/<index:07d>`. `label_path` maps a name to its label map;
    `vspec label` writes, and the token-labeling data set reads, maps under these names."""
    if hasattr(dataset, "samples") and hasattr(dataset, "root"):
        root = Path(dataset.root)
        return [Path(path).relative_to(root).as_posix() for path, _ in dataset.samples]
    targets = getattr(dataset, "targets", None)
    if targets is None:
        raise DataError(f"token labels: cannot name the images of a {type(dataset).__name__} (no files, no targets)")
    return [f"{int(t)}/{i:07d}" for i, t in enumerate(targets)]


def read_label_map(path) -> torch.Tensor:
    """One on-disk label map: a (2, k, Hm, Wm) tensor, plane 0 the top-k teacher scores, plane 1 their class
    indices (stored as floats), any dtype -> float32. Wm >= 6: the crop plane added later uses 6 entries."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise DataError(f"{path}: no label map (token labeling reads one per training image)") from None
    except Exception as e:  # a corrupt file raises whatever the unpickler or zip reader met
        raise DataError(f"{path}: not a readable label map ({type(e).__name__}: {e})") from None
    if not isinstance(data, torch.Tensor):
        raise DataError(f"{path}: a label map is one tensor, got {type(data).__name__}")
    if data.dim() != 4 or data.shape[0] != 2 or data.shape[3] < 6 or 0 in data.shape:
        raise DataError(f"{path}: a label map is (2, k, Hm, Wm) with Wm >= 6, got {tuple(data.shape)}")
    return data.float()


def _check_batch(batch: torch.Tensor, num_classes: int) -> None:
    if batch.dim() != 5 or batch.shape[1] != 3 or batch.shape[4] < 6:
        raise ValueError(f"relabel targets want (B, 3, k, Hm, Wm) label maps with Wm >= 6 (scores, class indices, "
                         f"crop plane), got {tuple(batch.shape)}")
    idx, cls = batch[:, 1], batch[:, 2, 0, 0, 5]
    for name, v in (("class index", idx), ("image class", cls)):
        if not ((v >= 0) & (v < num_classes) & (v == v.round())).all():
            raise ValueError(f"relabel targets: a {name} is not an integer in [0, {num_classes})")
    if batch.shape[2] > 1 and (idx.sort(dim=1).values.diff(dim=1) == 0).any():
        raise ValueError("relabel targets: a label map repeats a class index at one location (the top-k indices "
                         "of a location must be distinct)")


def dense_scores(batch: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Step 3: (B, C, Hm, Wm) zeros with each location's k scores written at their class indices (a class outside
    the top-k scores 0, not -inf)."""
    b, _, _, hm, wm = batch.shape
    return batch.new_zeros(b, num_classes, hm, wm, dtype=torch.float32).scatter_(1, batch[:, 1].long(),
                                                                          batch[:, 0].float())


def crop_boxes(coords: torch.Tensor, hm: int, wm: int, released: bool = False) -> torch.Tensor:
    """roi_align's (index, x1, y1, x2, y2) boxes, x along the map's last axis, in cells, the -0.5 putting cell
    centres on integers (aligned=False). coords: (B, 4) = (top, left, height, width) fractions (step 4)."""
    top, left, h, w = coords.unbind(1)
    index = torch.arange(len(coords), dtype=coords.dtype, device=coords.device)
    if released:  # step 5's transposed box: vertical range along x, all four scaled by Wm
        corners = (top * wm, left * wm, (top + h) * wm, (left + w) * wm)
    else:  # columns (left, width) along x scaled by Wm, rows (top, height) along y scaled by Hm
        corners = (left * wm, top * hm, (left + w) * wm, (top + h) * hm)
    return torch.stack([index, *(c - 0.5 for c in corners)], dim=1)


def pool(dense: torch.Tensor, boxes: torch.Tensor, size: int) -> torch.Tensor:
    """Step 5: torchvision's roi_align of the dense scores over the boxes to (B, C, size, size), with the
    release's defaults (spatial_scale 1, adaptive sampling_ratio -1, aligned=False)."""
    from torchvision.ops import roi_align  # extra

    return roi_align(dense, boxes, output_size=(size, size), spatial_scale=1.0, sampling_ratio=-1, aligned=False)


def relabel_target(batch: torch.Tensor, num_classes: int, *, lam: float = 1.0, smoothing: float = 0.1,
                   label_size: int = 1, released_alignment: bool = False) -> torch.Tensor:
    """Token-labeling targets from a batch of transformed label maps (B, 3, k, Hm, Wm) (plane 2: the crop's
    (top, left, height, width) fractions at [2, 0, 0, 0:4], the image class at [2, 0, 0, 5]).

    Returns (B, C, 2 + S²) for S = label_size > 1: column 0 the smoothed ground truth, column 1 the class-token
    target (the crop pooled to 1 x 1), columns 2.. the S x S token targets row-major; (B, C, 2) for S = 1.
    Pooled scores are softmaxed over classes then smoothed (`p·on + off`: a row sums to 1 + smoothing / C, as
    released), and the batch is mixed with its flip by `lam` (step 8). The input is left untouched.
    """
    _check_batch(batch, num_classes)
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


def soft_cross_entropy(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over rows of Σ_c −t·log_softmax(x); a target with fewer rows than x, a divisor of them, is tiled
    whole (`repeat`: rows t0..tB, t0..tB, ...) as released."""
    if x.dim() != 2 or target.dim() != 2 or x.shape[1] != target.shape[1]:
        raise ValueError(f"soft cross-entropy wants (N, C) logits and targets, got {tuple(x.shape)} and "
                         f"{tuple(target.shape)}")
    if x.shape[0] != target.shape[0]:
        if x.shape[0] % target.shape[0]:
            raise ValueError(f"soft cross-entropy: {x.shape[0]} rows of logits against {target.shape[0]} rows of "
                             f"targets (not a multiple)")
        target = target.repeat(x.shape[0] // target.shape[0], 1)
    return (-target * F.log_softmax(x, dim=-1)).sum(dim=-1).mean()


def cos_reg_term(atten, n_comn: int = N_COMN) -> torch.Tensor:
    """Refiner's cos_reg: 0.1 · mean(Σ_{i < n_comn} cos(atten[i], atten[i + 1])) / n_comn, the cosine taken across
    the heads axis of the (B, heads, N + 1, N + 1) maps (eps 1e-8), the mean over (batch, query, key)."""
    if atten is None or len(atten) < n_comn + 1 or n_comn < 1:
        got = "none" if atten is None else len(atten)
        raise ValueError(f"cos_reg with n_comn={n_comn} needs n_comn + 1 attention maps (n_comn >= 1), got {got}")
    total = sum(F.cosine_similarity(atten[i], atten[i + 1], dim=1, eps=1e-8) for i in range(n_comn))
    return 0.1 * total.mean() / n_comn


def _box_lam(box, tokens: int) -> float:
    """MixToken's share of the image's own tokens: 1 − (r2 − r1)(c2 − c1) / N; no box (None) -> 1."""
    if box is None:
        return 1.0
    r1, c1, r2, c2 = (int(v) for v in box)
    return 1.0 - (r2 - r1) * (c2 - c1) / tokens


def _mixed(target: torch.Tensor, lam: float) -> torch.Tensor:
    return lam * target + (1.0 - lam) * target.flip(0) if lam < 1.0 else target


def _check_logits(cls: torch.Tensor, aux: torch.Tensor) -> None:
    if cls.dim() != 2 or aux.dim() != 3 or aux.shape[0] != cls.shape[0] or aux.shape[2] != cls.shape[1]:
        raise ValueError(f"relabel losses want class logits (B, C) and token logits (B, N, C), got "
                         f"{tuple(cls.shape)} and {tuple(aux.shape)}")


def relabel_cross_entropy(cls: torch.Tensor, aux: torch.Tensor, box, target: torch.Tensor, *,
                          dense_weight: float = 0.5, cls_weight: float = 1.0, atten=None,
                          n_comn: int = N_COMN) -> torch.Tensor:
    """The released RelabelCrossEntropy on the model's (cls (B, C), aux (B, N, C), MixToken box (r1, c1, r2, c2)
    or None): cls_weight·CE(cls, class target mixed by the box's lam) + dense_weight·CE(tokens, token targets)
    (+ cos_reg_term(atten, n_comn) when atten is given). `target`: (B, C, 2 + N) from relabel_target (column 1
    the class target, columns 2.. the tokens; column 0 unused), or (B, C), every token taking its image's row.
    The token targets are never box-mixed: the model un-mixes its token logits."""
    _check_logits(cls, aux)
    b, n, c = aux.shape
    if target.dim() == 3:
        if target.shape[:2] != (b, c) or target.shape[2] != 2 + n:
            raise ValueError(f"relabel target {tuple(target.shape)} does not fit {n} tokens of {c} classes "
                             f"(want ({b}, {c}, {2 + n}): label_size² must equal the token count)")
        t_cls, t_tokens = target[:, :, 1], target[:, :, 2:].transpose(1, 2)
    elif target.dim() == 2 and target.shape == (b, c):
        t_cls, t_tokens = target, target[:, None, :].expand(b, n, c)
    else:
        raise ValueError(f"relabel target {tuple(target.shape)}: want ({b}, {c}, {2 + n}) or ({b}, {c})")
    loss = cls_weight * soft_cross_entropy(cls, _mixed(t_cls, _box_lam(box, n)))
    loss = loss + dense_weight * soft_cross_entropy(aux.reshape(b * n, c), t_tokens.reshape(b * n, c))
    return loss if atten is None else loss + cos_reg_term(atten, n_comn)


def relabel_pooled_cross_entropy(cls: torch.Tensor, aux: torch.Tensor, box, target: torch.Tensor, *,
                                 dense_weight: float = 0.5, cls_weight: float = 1.0) -> torch.Tensor:
    """The released RelabelPooledCrossEntropy (label_size 1, --dense-avg-pool): cls_weight·CE(cls, target mixed
    by the box's lam) + dense_weight·CE(mean of the token logits, target unmixed); target (B, C) only."""
    _check_logits(cls, aux)
    if target.shape != cls.shape:
        raise ValueError(f"the pooled relabel loss wants a (B, C) target, got {tuple(target.shape)} "
                         f"(a token-label target needs relabel_cross_entropy)")
    loss = cls_weight * soft_cross_entropy(cls, _mixed(target, _box_lam(box, aux.shape[1])))
    return loss + dense_weight * soft_cross_entropy(aux.mean(dim=1), target)


def soft_target_ce_cos_reg(x: torch.Tensor, target: torch.Tensor, atten, n_comn: int = 2) -> torch.Tensor:
    """The released SoftTargetCrossEntropyCosReg (cos_reg without token labels): CE(x, target) + the cos term;
    n_comn 2, the released constructor's default, whatever cos_reg_component is."""
    return soft_cross_entropy(x, target) + cos_reg_term(atten, n_comn)
