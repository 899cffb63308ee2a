"""`vspec data pack IMAGEFOLDER OUT`: an image folder as WebDataset tar shards and their manifest, for
`vspec train --data shards` (vspec/train/data/pack.py). Torch-free."""

from __future__ import annotations

import argparse
import sys
import time

from ..train.data.pack import MANIFEST, MIN_SHARDS, SHARD_BYTES, pack
from ..train.data.registry import DataError
from .common import UsageError, int_in, one_line, output_folder, printable

DEFAULT = f"at least {MIN_SHARDS} training shards, at most ~{SHARD_BYTES >> 30} GiB each"
NAME, HELP = "data", "prepare data sets: pack an image folder into WebDataset tar shards (vspec data pack)"


def add_parser(sub) -> None:
    d = sub.add_parser(NAME, help=HELP, description="Prepare data sets for vspec train.")
    actions = d.add_subparsers(dest="action", required=True, metavar="ACTION", parser_class=type(d))
    p = actions.add_parser("pack", help="an image folder as WebDataset tar shards (--data shards)",
                           description="Pack IMAGEFOLDER/train/<class>/ and IMAGEFOLDER/val/<class>/ (what --data "
                                       "imagefolder reads) into OUT/train-000000.tar ..., OUT/val-000000.tar ... and "
                                       f"OUT/{MANIFEST} (class names in index order; per shard its sample count and "
                                       "sha256). Each sample is the image file's bytes, not re-encoded, and its "
                                       "class index. The training images are shuffled (--seed) before packing, so "
                                       "that every shard holds every class. Train from them with vspec train --data "
                                       "shards --data-dir OUT.")
    p.add_argument("folder", metavar="IMAGEFOLDER", help="a folder with train/<class>/ and val/<class>/")
    p.add_argument("out", metavar="OUT", help="the folder to write (new, or empty; see --overwrite)")
    p.add_argument("--shard-size", type=int_in(1), default=None, metavar="N",
                   help=f"images per shard (default: {DEFAULT}); each loader worker of a training run reads "
                        "shards of its own: with fewer shards than processes x workers, the run uses fewer workers")
    p.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0, help="the training images' shuffle (default 0)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier pack in OUT (its shards and manifest); without it a non-empty OUT is "
                        "refused")


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
    out = output_folder("OUT", args.out)
    try:
        manifest = pack(args.folder, out, shard_size=args.shard_size, seed=args.seed, overwrite=args.overwrite,
                        progress=_Report())
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
