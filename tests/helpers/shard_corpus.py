"""Malformed WebDataset packs for --data shards (issue 54), the corpus's classes drawn like
tests/helpers/data_corpus.py's: manifest names that would run a command or leave the pack's folder, manifest fields
of other types, nested or endless manifests, shards that are FIFOs, devices or endless streams, members beyond the
size bound, brace patterns too large to expand; and `vspec data pack` on an image folder with an image it cannot
read; `vspec data pack --from-hf` on Hugging Face datasets it must refuse (`hf_pack_cases`). Each case is (name,
entry, argv, marker): tools/train.py's (or vspec's) argv, and the file a command injected
through the pack would create (None where none could run): a case is clean only when that file never appears.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

from tests.helpers.data_corpus import SPECIAL, special_file
from tests.helpers.hf_data import from_folder
from tests.helpers.shard_runs import image_folder
from vspec.train.data.pack import MANIFEST, pack

SPEC = {"embedder": {"kind": "patch", "patch_size": 4}, "block": {"attention": {"kind": "mhsa", "heads": 2}},
        "depth": 1, "dim": 16, "img_size": 8, "in_chans": 3, "num_classes": 3}


def injections(shard: str, folder: Path | str, marker: Path | str) -> dict[str, str]:
    """Ways to write a manifest's name for `shard` (of the pack in `folder`) that a shell would run (each creates
    `marker` when it runs) or that would leave the pack's folder."""
    return {"; command": f"{shard}; touch {marker}", "&& command": f"{shard} && touch {marker}",
            "| command": f"{shard} | touch {marker}", "|| command": f"nothing.tar || touch {marker}",
            "$(command)": f"{shard}$(touch {marker})", "backticks": f"{shard}`touch {marker}`",
            "newline": f"{shard}\ntouch {marker}", "> redirect": f"{shard} > {marker}",
            "pipe: as a name": f"pipe:touch {marker}; cat {folder}/{shard}", "../ escape": f"../shards/{shard}",
            "absolute path": f"{folder}/{shard}", "URL": f"http://127.0.0.1:9/{shard}",
            "file: URL": f"file://{folder}/{shard}", "a seventh digit": shard.replace("-", "-0"),
            "other digits": shard.replace("000000", "\u0660" * 6), "a trailing space": f"{shard} "}


def member_tar(path: Path, size: int, sparse: bool = True) -> Path:
    """A tar whose one member `00000000.jpg` says it holds `size` bytes: a sparse file of that size (nothing
    written to the disk), or the header alone."""
    info = tarfile.TarInfo("00000000.jpg")
    info.size = size
    path.write_bytes(info.tobuf(format=tarfile.GNU_FORMAT))
    if sparse:
        os.truncate(path, 512 + size + 1024)  # the member's zeros, then the end-of-archive blocks
    return path


def edited(folder: Path, change: Callable[[dict], object]) -> None:
    """The pack's manifest after `change(manifest)`, which edits it in place."""
    manifest = json.loads((folder / MANIFEST).read_text())
    change(manifest)
    (folder / MANIFEST).write_text(json.dumps(manifest))


def _set(split: str, key: str, value) -> Callable[[dict], None]:
    return lambda m: m[split][0].__setitem__(key, value)


FIELDS = {  # manifest fields of another type or range: what a hand-made or damaged manifest holds
    "count '6'": _set("train", "count", "6"), "count 6.0": _set("train", "count", 6.0),
    "count null": _set("train", "count", None), "count true": _set("val", "count", True),
    "count 0": _set("val", "count", 0), "count -1": _set("train", "count", -1),
    "count 2**70": _set("train", "count", 2**70), "count []": _set("train", "count", []),
    "sha256 5": _set("train", "sha256", 5), "sha256 null": _set("val", "sha256", None),
    "sha256 'zz'": _set("train", "sha256", "zz"), "name 7": _set("train", "name", 7),
    "name null": _set("val", "name", None), "no name": lambda m: m["train"][0].pop("name"),
    "classes []": lambda m: m.__setitem__("classes", []), "classes [1]": lambda m: m.__setitem__("classes", [1]),
    "classes 'abc'": lambda m: m.__setitem__("classes", "abc"),
    "classes repeated": lambda m: m.__setitem__("classes", ["a", "a", "b"]),
    "train 'x'": lambda m: m.__setitem__("train", "x"), "train [5]": lambda m: m.__setitem__("train", [5]),
    "train []": lambda m: m.__setitem__("train", []), "val []": lambda m: m.__setitem__("val", []),
    "no val": lambda m: m.pop("val"), "format 2": lambda m: m.__setitem__("format", "vspec-shards/2"),
    "a shard twice": lambda m: m["train"].append(dict(m["train"][0])),
}


def _special(kind: str, name: str) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        (d / name).unlink()
        special_file(d / name, kind)
    return make


def _raw(data: bytes) -> Callable[[Path], None]:
    return lambda d: (d / MANIFEST).write_bytes(data)


def _sparse(name: str, size: int) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        with open(d / name, "ab") as f:
            f.truncate(size)
    return make


def _endless_script(d: Path) -> None:
    (d / "endless.sh").write_text('case "$1" in *.json) cat "$1";; *) cat "$1" /dev/zero;; esac\n')


def variants(good: bytes, rng: random.Random) -> dict[str, tuple[Callable[[Path], None], str]]:
    """Ways to damage a pack, each (a function that damages a copy, the --data-dir to give: `{d}` is the copy;
    a case that would run a command names `{marker}`)."""
    out: dict[str, tuple[Callable[[Path], None], str]] = {}
    for split, shard in (("train", "train-000000.tar"), ("val", "val-000000.tar")):
        for form in injections(shard, "", ""):
            def inject(d: Path, split=split, shard=shard, form=form) -> None:
                name = injections(shard, d, d.parent / "markers" / d.name)[form]
                edited(d, lambda m: m[split][0].__setitem__("name", name))
            out[f"shard names: {split} {form}"] = (inject, "pipe:cat {d}")
    out["shard names: val ; command, a pattern of shards"] = (
        lambda d: edited(d, _set("val", "name", f"val-000000.tar; touch {d.parent / 'markers' / d.name}")),
        "pipe:cat {d}/train-{{000000..000001}}.tar")
    for field, change in FIELDS.items():
        out[f"manifest: {field}"] = (lambda d, change=change: edited(d, change), "{d}")
    out.update({
        "manifest: nested 100,000 deep": (_raw(b"[" * 100_000 + b"]" * 100_000), "{d}"),
        "manifest: random bytes": (lambda d: (d / MANIFEST).write_bytes(rng.randbytes(rng.randint(1, 4096))), "{d}"),
        "manifest: truncated": (lambda d: (d / MANIFEST).write_bytes(good[:rng.randrange(len(good))]), "{d}"),
        "manifest: a JSON list": (_raw(b"[" + good + b"]"), "{d}"),
        "manifest: a JSON string": (_raw(b'"manifest"'), "{d}"),
        "manifest: 100 MiB": (_sparse(MANIFEST, 100 << 20), "{d}"),
        "manifest: endless, a pipe: command": (lambda d: None, "pipe:cat /dev/zero #{d}"),
    })
    for kind in SPECIAL:
        out[f"manifest: is {kind}"] = (_special(kind, MANIFEST), "{d}")
        out[f"shard files: train-000000.tar is {kind}"] = (_special(kind, "train-000000.tar"), "{d}")
    out.update({
        "shard files: val-000000.tar is a FIFO": (_special("FIFO", "val-000000.tar"), "{d}"),
        "shard files: a 7 GiB member": (lambda d: member_tar(d / "train-000001.tar", 7 << 30), "{d}"),
        "shard files: a 7 GiB member's header alone": (
            lambda d: member_tar(d / "train-000001.tar", 7 << 30, sparse=False), "{d}"),
        "shard files: 2 MiB after the tar's end": (_sparse("train-000001.tar", 2 << 20), "{d}"),
        "shard files: an endless stream after the tar": (
            _endless_script, "pipe:sh {d}/endless.sh {d}/train-{{000000..000001}}.tar"),
        "shard files: more samples than the manifest's": (lambda d: edited(d, _set("train", "count", 1)), "{d}"),
        "shard pattern: 10**9 names": (lambda d: None, "{d}/train-{{000000000..999999999}}.tar"),
        "shard pattern: 10**12 names in a product": (lambda d: None, "{d}/train-{{0..9999}}{{0..9999}}{{0..9999}}.tar"),
        "shard pattern: braces 100 deep": (lambda d: None, "{d}/train-" + "{{a," * 100 + "b" + "}}" * 100 + ".tar"),
        "shard pattern: unbalanced braces": (lambda d: None, "{d}/train-{{000000..000001.tar"),
        "shard pattern: a 5000-digit range": (lambda d: None, "{d}/train-{{0.." + "9" * 5000 + "}}.tar"),
        "shard pattern: 100,000 characters": (lambda d: None, "{d}/" + "x" * 100_000),
    })
    return out


def shard_cases(folder: Path, n: int = 0, seed: int = 0) -> list[tuple[str, str, list[str], str | None]]:
    """Every variant (then `n` random repeats) on a copy of a small pack (6 training images in 2 shards, 3 for
    validation), given to tools/train.py --data shards: (name, entry, argv, marker)."""
    rng = random.Random(seed)
    good = folder / "good"
    pack(image_folder(folder / "images", per_class=2, size=8), good, shard_size=3)
    spec = folder / "spec.json"
    spec.write_text(json.dumps(SPEC))
    table = variants((good / MANIFEST).read_bytes(), rng)
    names = list(table) + [rng.choice(list(table)) for _ in range(n)]
    (folder / "markers").mkdir()
    cases = []
    for i, name in enumerate(names):
        d = folder / str(i)
        shutil.copytree(good, d)
        damage, data_dir = table[name]
        damage(d)
        marker = folder / "markers" / str(i)
        argv = [str(spec), "--data", "shards", "--data-dir", data_dir.format(d=d, marker=marker), "--out",
                str(folder / "runs" / str(i)), "--batch-size", "2", "--device", "cpu", "--max-steps", "1"]
        cases.append((f"{name} #{i}", "train", argv, str(marker) if name.startswith("shard names") else None))
    # a training image linked to /proc/self/mem (a regular file to stat, EIO to read), in the first shard
    images = image_folder(folder / "unreadable", per_class=2, size=8)
    special_file(next((images / "train").glob("*/000.jpg")).with_name("mem.jpg"), "/proc/self/mem")
    cases.append(("pack: an image linked to /proc/self/mem", "vspec",
                  ["data", "pack", str(images), str(folder / "unreadable_pack"), "--shard-size", "100"], None))
    return cases + hf_pack_cases(folder / "hf")


def _hf_rows(images: Path, change: Callable[[dict], object] | None = None, label=None):
    """The image folder `images` as a DatasetDict (train, validation), its rows' columns as `change({split:
    {"image": [...], "label": [...]}})` leaves them, the labels a ClassLabel (or `label`)."""
    import datasets

    dd = from_folder(images)
    columns = {split: ds.cast_column("image", datasets.Image(decode=False)).to_dict() for split, ds in dd.items()}
    if change is not None:
        change(columns)
    features = datasets.Features({k: v for k, v in dd["train"].features.items() if k in columns["train"]})
    if label is not None:
        features["label"] = label
    return datasets.DatasetDict({split: datasets.Dataset.from_dict(c, features=features)
                                 for split, c in columns.items()})


def _set_cell(split: str, column: str, row: int, value) -> Callable[[dict], None]:
    return lambda c: c[split][column].__setitem__(row, value)


def _path_rows(d: Path, dd) -> None:
    """`dd` as arrow files (train.arrow, validation.arrow) written as they are: a row stored as a path stays one
    (save_to_disk would read its file into the row)."""
    import pyarrow as pa

    d.mkdir(parents=True)
    for split, ds in dd.items():
        with pa.OSFile(str(d / f"{split}.arrow"), "wb") as f, pa.ipc.new_stream(f, ds.data.schema) as writer:
            writer.write_table(ds.data.table)


ONE_SHARD = ("--shard-size", "100")  # a pack's line per shard is written after it: none before the error's


def hf_pack_cases(folder: Path) -> list[tuple[str, str, list[str], None]]:
    """`vspec data pack --from-hf` on datasets written with `datasets` (a save_to_disk folder of an image folder's
    6 training and 3 validation JPEGs, then changed): no image column, bytes that are no image in a row, a row with
    no image or one stored as a path to a FIFO, a label -1 (ClassLabel's "no label"), missing, or past the training
    set's largest, an empty validation split, OUT inside the dataset's folder."""
    import datasets

    images = image_folder(folder / "images", per_class=2, size=8)
    fifo = special_file(folder / "fifo.jpg", "FIFO")
    variants = {
        "no image column": lambda c: [c[s].pop("image") for s in c],
        "row 4 holds bytes that are no image": _set_cell("train", "image", 4, {"bytes": b"%PDF-1.4 no image",
                                                                             "path": None}),
        "row 1 holds no image": _set_cell("train", "image", 1, None),
        "row 3 holds an empty image": _set_cell("train", "image", 3, {"bytes": b"", "path": None}),
        "label -1 (ClassLabel's no label)": _set_cell("train", "label", 2, -1),
        "a label missing": _set_cell("validation", "label", 0, None),
        "an empty validation split": lambda c: c.__setitem__("validation", {k: [] for k in c["validation"]}),
    }
    cases = []
    for i, (name, change) in enumerate(variants.items()):
        where = folder / f"saved{i}"
        _hf_rows(images, change).save_to_disk(str(where))
        cases.append((f"pack from hf: {name}", "vspec", ["data", "pack", "--from-hf", str(where),
                                                         str(folder / f"out{i}"), *ONE_SHARD], None))
    where = folder / "past"  # an integer label column: the classes 0 to the training set's largest (2)
    _hf_rows(images, _set_cell("validation", "label", 2, 7), label=datasets.Value("int64")).save_to_disk(str(where))
    cases.append(("pack from hf: a validation label past the training set's largest", "vspec",
                  ["data", "pack", "--from-hf", str(where), str(folder / "out_past"), *ONE_SHARD], None))
    _path_rows(folder / "paths", _hf_rows(images, _set_cell("train", "image", 0, {"bytes": None,
                                                                                  "path": str(fifo)})))
    cases.append(("pack from hf: a row stored as a path to a FIFO", "vspec",
                  ["data", "pack", "--from-hf", str(folder / "paths"), str(folder / "out_fifo"), *ONE_SHARD], None))
    cases.append(("pack from hf: OUT inside the dataset's folder", "vspec",
                  ["data", "pack", "--from-hf", str(folder / "saved0"), str(folder / "saved0" / "shards")], None))
    return cases
