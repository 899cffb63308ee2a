"""`vspec data pack IMAGEFOLDER OUT`: an image folder (or, with --from-hf, a Hugging Face dataset) as WebDataset tar
shards and their manifest, for `vspec train --data shards` (vspec/train/data/pack.py). Torch-free."""

from __future__ import annotations

import argparse
import sys
import time

from ..extras import needs
from ..train.config import DataConfig
from ..train.data.pack import MANIFEST, MIN_SHARDS, SHARD_BYTES, pack
from ..train.data.pack_hf import pack_hf
from ..train.data.registry import HF, DataError
from .common import UsageError, int_in, one_line, output_folder, printable
from .fields import add_fields

__all__ = ["DEFAULT", "HELP", "NAME", "add_parser", "run"]

_PACK_HF = tuple(k for k in HF if k not in ("text_columns", "streaming"))  # the options that name the images packed

DEFAULT = f"at least {MIN_SHARDS} training shards, at most ~{SHARD_BYTES >> 30} GiB each"
NAME, HELP = "data", ("prepare data sets: pack an image folder or a Hugging Face dataset into WebDataset tar shards "
                      "(vspec data pack)")


def add_parser(sub) -> None:
    """Add `vspec data`'s parser (its flags and help) to the command's subparsers.

    Args:
        sub: the `vspec` parser's subparsers action (`vspec.cli.parser`)."""
    d = sub.add_parser(NAME, help=HELP, description="Prepare data sets for vspec train.")
    actions = d.add_subparsers(dest="action", required=True, metavar="ACTION", parser_class=type(d))
    p = actions.add_parser("pack", help="an image folder or a Hugging Face dataset as WebDataset tar shards (--data "
                                        "shards)",
                           description="Pack IMAGEFOLDER/train/<class>/ and IMAGEFOLDER/val/<class>/ (what --data "
                                       "imagefolder reads) into OUT/train-000000.tar ..., OUT/val-000000.tar ... and "
                                       f"OUT/{MANIFEST} (class names in index order; per shard its sample count and "
                                       "sha256). Each sample is the image file's bytes, not re-encoded, and its "
                                       "class index. The training images are shuffled (--seed) before packing, so "
                                       "that every shard holds every class. Train from them with vspec train --data "
                                       "shards --data-dir OUT. With --from-hf, IMAGEFOLDER is a Hugging Face dataset "
                                       "(what --data hf reads): its train split and its validation split are packed "
                                       "the same way, each image the bytes the dataset stores (a JPEG stays the same "
                                       "bytes, an image written as pixels the PNG datasets made of them), the classes "
                                       "its ClassLabel's names.")
    p.add_argument("folder", metavar="IMAGEFOLDER", help="a folder with train/<class>/ and val/<class>/; with "
                                                         "--from-hf, a save_to_disk folder, parquet / arrow files (a "
                                                         "folder, a file or a glob) or a Hub dataset id read from "
                                                         "the local cache")
    p.add_argument("out", metavar="OUT", help="the folder to write (new, or empty; see --overwrite)")
    p.add_argument("--shard-size", type=int_in(1), default=None, metavar="N",
                   help=f"images per shard (default: {DEFAULT}); each loader worker of a training run reads "
                        "shards of its own: with fewer shards than processes x workers, the run uses fewer workers")
    p.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0, help="the training images' shuffle (default 0)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier pack in OUT (its shards and manifest); without it a non-empty OUT is "
                        "refused")
    hf = p.add_argument_group("a Hugging Face dataset (--from-hf; pip install 'vspec[hf]')")
    hf.add_argument("--from-hf", action="store_true", help="IMAGEFOLDER is a Hugging Face dataset")
    add_fields(hf, DataConfig, only=_PACK_HF)  # --data hf's options for images, as vspec train takes them


class _Report:
    """A line per shard on stderr, at most one a second but the last of each split."""

    def __init__(self):
        self.last = 0.0

    def __call__(self, split: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - self.last >= 1.0:
            self.last = now
            print(f"pack: {split} {done}/{total} images", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> None:
    """Carry out `vspec data` (called by `vspec.cli.main`; its errors become one line and exit 2).

    Args:
        args: the command line as `add_parser`'s parser parsed it."""
    out = output_folder("OUT", args.out)
    common = dict(shard_size=args.shard_size, seed=args.seed, overwrite=args.overwrite, progress=_Report())
    hf = {k: getattr(args, k) for k in _PACK_HF}
    given = next((k for k, v in hf.items() if v is not None), None)
    if given and not args.from_hf:
        raise UsageError(f"vspec data pack: error: --{given.replace('_', '-')} is for a Hugging Face dataset: add "
                         "--from-hf")
    try:
        if args.from_hf:
            with needs("vspec data pack --from-hf"):
                import datasets  # extra  # noqa: F401
            manifest = pack_hf(args.folder, out, **hf, **common)
        else:
            manifest = pack(args.folder, out, **common)
    except DataError as e:
        raise UsageError(f"vspec data pack: error: {one_line(e).removeprefix('pack: ')}") from None
    said = {}
    for split in ("train", "val"):
        shards, images = len(manifest[split]), sum(x["count"] for x in manifest[split])
        said[split] = f"{images} image{'s' * (images != 1)} in {shards} shard{'s' * (shards != 1)}"
    size = manifest["shard_size"]
    chose = f" (the default: {DEFAULT})" if args.shard_size is None else ""
    print(f"{printable(str(out))}: training {said['train']}, validation {said['val']}, {len(manifest['classes'])} "
          f"classes, {size} image{'s' * (size != 1)} a shard{chose}; vspec train --data shards --data-dir "
          f"{printable(str(out))}")
