"""`vspec label MODEL --data ... --out DIR`: token-label maps (Refiner's / LV-ViT's token labeling) of every
training image, made by any vspec model or timm model (vspec/train/token_labels/writer.py), in the released on-disk
format (one `torch.save`d (2, k, Hm, Wm) map per image, under `token_labels.maps.label_path(OUT, key)`). A second run
skips the maps already written; every map is written atomically."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import attrs

from ..spec import from_json, load_spec
from ..spec.catalogue import is_checkpoint, presets
from ..train.config import DataConfig, RunConfig
from ..train.data.registry import options
from ..train.progress import Progress
from ..train.recipes import Recipe
from ..train.validators import MEAN, POSITIVE_INT, STD, ints, rule
from .common import (
    OneLineParser,
    UsageError,
    one_line_warnings,
    output_folder,
    pretrained_flag,
)
from .fields import field_rules
from .train import check_flags, data_args, errors, report

__all__ = ["HELP", "NAME", "label", "label_parser", "main"]

_LABEL_RUN = ("seed", "workers", "device")  # the run's fields that labeling takes too (as evaluation)
NAME, HELP = "label", "write token-label maps of a data set's training images with a model"
_TIMM = "timm:"
# what makes two runs the same labeling (labels.json): a resumed run must match them
_IDENTITY = ("model", "pretrained", "data", "options", "images", "grid", "top_k", "classes", "img_size", "scores")
_MAX_GRID = 64  # --grid's sides at most (the released maps are 14 x 14; a model's token grid rarely passes 64)


def label_parser(prog: str = "vspec label") -> argparse.ArgumentParser:
    """The parser of `vspec label`.

    Args:
        prog: the program's name in usage and error lines."""
    p = OneLineParser(prog=prog, description="Write a token-label map of every training image (token labeling, "
                      "LV-ViT's and Refiner's: the released format, one torch.save'd (2, k, Hm, Wm) tensor per image "
                      "under OUT/<class_dir>/<file cut at its first dot>.pt: plane 0 the top-k logits, plane 1 their "
                      "class indices as floats). The whole image is resized to the model's input (no crop); the "
                      "classifier scores every location of its last token grid, resampled to --grid. A second run "
                      "skips the maps already written.")
    p.add_argument("model", metavar="MODEL",
                   help="a checkpoint (.pt), a training run's folder (its best.pt), a model folder, a spec file or "
                        "preset name (random weights, or --pretrained), or timm:NAME (a bare name that is no vspec "
                        "preset is tried as timm's)")
    pretrained_flag(p, "label with")
    data_args(p, _LABEL_RUN)
    p.add_argument("--out", required=True, metavar="DIR", help="where the label maps go")
    p.add_argument("--top-k", type=int, default=5, metavar="K", help="scores kept per location (default 5)")
    p.add_argument("--grid", type=int, nargs="+", default=[14], metavar="N",
                   help=f"the maps' grid, Hm [Wm] (default 14; Wm >= 6, each at most {_MAX_GRID}): the logits are "
                        "resampled to it, per axis "
                        "adaptive average pooling where the model's grid is larger, bilinear where smaller")
    p.add_argument("--img-size", type=int, nargs="+", metavar="PX",
                   help="run the model at this size (H [W]); default: the model's (a vspec model's spec, a timm "
                        "model's data config)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--limit", type=int, metavar="N", help="write at most N maps in this run (a later run goes on)")
    p.add_argument("--overwrite", action="store_true", help="write every map anew (default: skip those there)")
    return p


def _label_rules() -> dict:
    return {**field_rules(DataConfig), **field_rules(RunConfig, _LABEL_RUN), "batch_size": rule(Recipe, "batch_size"),
            "mean": MEAN, "std": STD, "img_size": POSITIVE_INT, "top_k": POSITIVE_INT,
            "grid": ints(1, _MAX_GRID), "limit": POSITIVE_INT}


def main(argv=None, prog: str = "vspec label") -> int:
    """0 when every map asked for is written; 2 and one line on stderr for what cannot be done.

    Args:
        argv: the arguments (default: sys.argv[1:]).
        prog: the program's name in usage and error lines."""
    with one_line_warnings(prog):
        try:
            args = label_parser(prog).parse_args(argv)
            check_flags(args, _label_rules(), prog)
            label(args, prog)
        except SystemExit:
            raise
        except errors() as e:
            return report(e, prog)
    return 0


def _pair(values: list[int], flag: str, prog: str) -> tuple[int, int]:
    if len(values) > 2:
        raise UsageError(f"{prog}: error: {flag} takes H or H W, got {' '.join(map(str, values))}")
    return values[0], values[-1]


def _vspec_model(args, prog: str):
    """(model, in_chans, img_size, the weights' data config or None, what it is) of a vspec MODEL."""
    import torch  # torch

    from ..compiler import build  # torch
    from ..weights.checkpoint import at_img_size, load_weights  # torch
    from ..weights.loading import load_checkpoint  # torch

    path, cfg = args.model, None
    if args.pretrained:
        from ..weights.converted import pretrained_cfg  # torch
        from ..weights.published import published  # torch

        got = published(str(path), args.pretrained)
        path = got.folder
        cfg = pretrained_cfg(got.name, got.tag, got.entry, got.preset, got.verified)
    elif Path(path).is_dir() and not (Path(path) / "config.json").exists() and (Path(path) / "best.pt").is_file():
        path = Path(path) / "best.pt"  # a training run's folder
    if args.pretrained or is_checkpoint(path):
        ckpt = load_checkpoint(path)
        spec, weights = from_json(ckpt["spec"]), ckpt["state_dict"]
        cfg = cfg or ckpt.get("pretrained_cfg") or ckpt.get("inputs")
    else:
        spec, weights = load_spec(str(path)), None
    if spec.embedder.text:
        raise UsageError(f"{prog}: error: {args.model}: a text body (token labels are for image models)")
    if weights is None:
        print(f"{prog}: {path} is a spec: random weights, seeded by --seed (give a checkpoint, or --pretrained)",
              file=sys.stderr)
    if args.img_size is not None:
        size = _pair(args.img_size, "--img-size", prog)
        if weights is None:
            spec = attrs.evolve(spec, img_size=size)
        else:
            spec, weights = at_img_size(spec, weights, size, path, batch=args.batch_size)
    torch.manual_seed(args.seed)  # a spec's random weights: the same in a resumed run
    model = build(spec)
    if weights is not None:
        load_weights(model, weights, path, "weights")
    return model, spec.in_chans, tuple(spec.img_size), cfg


def _timm_model(name: str, args, prog: str, num_classes):
    """(model, in_chans, img_size, its data config) of timm's `name` (its published weights with --pretrained,
    from timm's cache or hub; else random weights with `num_classes`)."""
    import timm  # extra
    import torch  # torch

    if not timm.is_model(name.split(".")[0]):
        raise UsageError(f"{prog}: error: {name}: neither a vspec preset nor a timm model (a path? it does not exist)")
    kw = {} if args.pretrained else {"num_classes": num_classes}
    if args.img_size is not None:
        kw["img_size"] = _pair(args.img_size, "--img-size", prog)
    tag = f".{args.pretrained}" if isinstance(args.pretrained, str) else ""
    torch.manual_seed(args.seed)  # random weights: the same in a resumed run
    try:
        model = timm.create_model(name + tag, pretrained=bool(args.pretrained), **kw)
    except TypeError:  # a model without img_size (a CNN): any size runs
        kw.pop("img_size", None)
        model = timm.create_model(name + tag, pretrained=bool(args.pretrained), **kw)
    cfg = timm.data.resolve_data_config({}, model=model)
    size = getattr(getattr(model, "patch_embed", None), "img_size", None) or cfg["input_size"][1:]
    size = _pair(args.img_size, "--img-size", prog) if args.img_size else tuple(size)
    return model, cfg["input_size"][0], size, {k: cfg[k] for k in ("mean", "std", "interpolation")}


def _resolve(args, prog: str) -> tuple[str | None, str]:
    """(timm's name or None, how labels.json names the model)."""
    text = str(args.model)
    if text.startswith(_TIMM):
        return text[len(_TIMM):], text
    if Path(text).exists() or "/" in text or Path(text).suffix:
        return None, text
    return (None, text) if text.split(".")[0] in presets() else (text, _TIMM + text)


def label(args: argparse.Namespace, prog: str) -> dict:
    """Write the maps; returns what labels.json records, with this run's written / skipped counts.

    Args:
        args: `label_parser`'s parsed arguments.
        prog: the program's name in error lines."""
    import torch  # torch

    from ..train.data.preprocess import inputs_line, resolve_inputs  # torch
    from ..train.distributed import workers_for  # torch
    from ..train.files import atomic_write_text  # torch
    from ..train.token_labels.maps import data_place, image_keys  # torch
    from ..train.token_labels.writer import MIN_WIDTH, pending, scorer, write_label_maps  # torch

    grid = _pair(args.grid, "--grid", prog)
    if grid[1] < MIN_WIDTH:
        raise UsageError(f"{prog}: error: --grid {grid[0]} {grid[1]}: the maps' width must be >= {MIN_WIDTH} (the "
                         "crop plane the data set adds stores 6 numbers along it)")
    out = output_folder("--out", args.out)
    timm_name, named = _resolve(args, prog)
    if timm_name is None:
        model, in_chans, size, cfg = _vspec_model(args, prog)
    else:  # random weights take the data set's classes: known once it is read (timm's default for synthetic)
        classes = None if args.pretrained or args.data == "synthetic" else _classes(args)
        model, in_chans, size, cfg = _timm_model(timm_name, args, prog, classes or 1000)
    score = scorer(model.eval())  # a model that cannot score every token is refused before the data is read
    classes = model.num_classes
    if args.top_k > classes:
        raise UsageError(f"{prog}: error: --top-k {args.top_k}: the model has {classes} classes")
    inputs = resolve_inputs({k: getattr(args, k) for k in ("mean", "std", "interpolation")}, cfg, in_chans,
                            label=f"{named}'s data config" if timm_name else None)
    train_ds, n = _training_images(args, size, in_chans, inputs, classes, prog)
    record = {"model": named, "pretrained": args.pretrained, "data": args.data,  # the data set: token_labels reads it
              "data_dir": data_place(args.data_dir), "options": options(args), "split": "train",
              "images": len(train_ds), "grid": list(grid), "top_k": args.top_k, "classes": n, "img_size": list(size),
              "scores": "logits", "inputs": {k: inputs[k] for k in ("mean", "std", "interpolation")}}
    _check_same(out, record, args.overwrite, prog)
    print(f"{prog}: {inputs_line(inputs)}", file=sys.stderr)
    device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
    model.to(device)
    written, skipped = write_label_maps(
        score, train_ds, out, grid=grid, k=args.top_k, batch_size=args.batch_size,
        workers=workers_for(args.workers, device), device=device, overwrite=args.overwrite, limit=args.limit,
        progress=lambda total: Progress(total, "label", unit="img", interval=30.0))
    left = len(pending(image_keys(train_ds), out))  # the maps still missing (after --overwrite --limit too)
    record["count"] = len(train_ds) - left
    atomic_write_text(json.dumps(record, indent=1), out / "labels.json")
    print(f"{out}: {written} label maps written, {skipped} already there"
          + (f", {left} left for a later run" if left else "")
          + f" ({args.top_k} logits at {grid[0]}x{grid[1]}, {n} classes, {args.data}'s {len(train_ds)} training "
            f"images)")
    return {**record, "written": written, "skipped": skipped}


def _training_images(args, size: tuple[int, int], in_chans: int, inputs: dict, classes: int, prog: str):
    """(the data set's training images as the model takes them, whole: no crop; its class count), which must be
    the model's."""
    from ..train.data.sources import build_datasets  # torch
    from ..train.data.transforms import build_transforms  # torch

    tf = build_transforms(size, in_chans, train=False, crop_ratio=1.0, mean=inputs["mean"], std=inputs["std"],
                          interpolation=inputs["interpolation"])
    train_ds, _, n = build_datasets(args.data, img_size=size, in_chans=in_chans, train_transform=tf,
                                    eval_transform=tf, data_dir=args.data_dir, download=args.download,
                                    num_classes=classes if args.data == "synthetic" else None,
                                    synthetic_size=args.synthetic_size, seed=args.seed, **options(args))
    if n != classes:
        raise UsageError(f"{prog}: error: {args.data} has {n} classes, the model {classes}")
    return train_ds, n


def _classes(args) -> int:
    """The data set's classes, read without a model (for timm's random weights)."""
    from ..train.data.sources import build_datasets  # torch

    return build_datasets(args.data, img_size=8, in_chans=3, train_transform=None, eval_transform=None,
                          data_dir=args.data_dir, download=args.download, synthetic_size=args.synthetic_size,
                          seed=args.seed, **options(args))[2]


def _check_same(out: Path, record: dict, overwrite: bool, prog: str) -> None:
    """A resumed run must be the same labeling as the one whose maps are there (labels.json, where written; a
    key it lacks, from an earlier vspec, is not compared); a labels.json that is no small JSON object is refused."""
    from ..train.token_labels.maps import read_record  # torch

    before = read_record(out)
    if before is None:
        return
    differ = [k for k in _IDENTITY if k in before and before[k] != record[k]]
    if differ and not overwrite:
        k = differ[0]
        raise UsageError(f"{prog}: error: {out} holds the maps of another labeling ({k} {before.get(k)!r} there, "
                         f"{record[k]!r} now): --overwrite to write them all anew, or another --out")
