"""Malformed inputs of token labeling and image folders (issue 54): the images `vspec label` and `vspec train --data
imagefolder` read, the label maps and labels.json `vspec train --token-labels` and a resumed `vspec label` read,
the normalisation flags of train / eval / label, and models whose scores overflow. Each `*_cases` function is a
class of inputs, `n` variants drawn from a seeded RNG (special files: FIFOs, links to /dev/zero and /proc/self/mem;
random bytes, cuts, a PNG header of 20,000 x 20,000 pixels, non-finite maps, JSON of other shapes, nesting, sizes
beyond the bound), returned as corpus cases (name, entry, argv, notes) for tests/helpers/cli_corpus.py. Every case
is bad input: one line on stderr, exit 2, no traceback, no hang; a file read mid-run stops the command after the
lines `NOTES` begins (the inputs, the head's note, a progress line), which are not counted. The model is a 2-class
ViT on 8 px images (a dense head, for token labels), the folders 4 images: each case runs in about a second.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.data_corpus import SPECIAL, _write, special_file

SPEC = {"embedder": {"kind": "patch", "patch_size": 4}, "block": {"attention": {"kind": "mhsa", "heads": 2}},
        "depth": 1, "dim": 16, "img_size": 8, "in_chans": 3, "num_classes": 2,
        "head": {"kind": "class_token", "dense": {}}}
IMAGES = ("a/0.png", "a/1.png", "b/0.png", "b/1.png")  # each split's, relative to it
GRID = (6, 6)  # the label maps' (Hm, Wm)
# the lines a run prints before it meets an input mid-run: label's inputs, the head's and the warmup's notes, progress
NOTES = ("vspec label: inputs: ", "note: the class_token head trains on ", "note: 1 epoch < ", "epoch ")
Cases = list[tuple[str, str, list[str], tuple[str, ...]]]


def png_header(width: int, height: int) -> bytes:
    """A PNG file of its header only (no pixel data), claiming `width` x `height` grey pixels: PIL refuses it at
    open as a decompression bomb when the pixels are many, without reading a byte of them."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) + \
        chunk(b"IEND", b"")


def image_folder(root: Path) -> Path:
    """`root`/{train,val}/<class>/<n>.png: 4 random 8 x 8 RGB images each."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name in IMAGES:
            (root / split / name).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(root / split / name)
    return root


def write_maps(root: Path, classes: int = 2, k: int = 2) -> Path:
    """A label folder of `image_folder`'s training images: (2, k, *GRID) maps, as `vspec label` names them."""
    import torch

    gen = torch.Generator().manual_seed(0)
    for name in IMAGES:
        indices = torch.stack([torch.randperm(classes, generator=gen)[:k] for _ in range(GRID[0] * GRID[1])])
        scores = torch.rand(k, *GRID, generator=gen)
        path = root / (name.split(".", 1)[0] + ".pt")
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(torch.stack([scores, indices.T.reshape(k, *GRID).float()]), path)
    return root


def _copies(base: Path, where: Path, kinds: tuple[str, ...], n: int) -> Iterator[tuple[int, str, Path]]:
    """`n` draws (i, kind, a fresh copy of the folder `base` under `where`), the kinds in turn."""
    for i in range(n):
        shutil.copytree(base, where / str(i))
        yield i, kinds[i % len(kinds)], where / str(i)


def _cut(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(1, len(data))]


def _setup(folder: Path) -> tuple[str, Path, Path]:
    """(the spec file, a good image folder, a good label folder), written once under `folder`, with `dense.pt`
    (the spec's checkpoint: what `vspec label` labels with), `huge.pt` (finite weights whose scores overflow) and
    `nan.pt` (a NaN weight)."""
    import torch

    import vspec

    spec = str(_write(folder / "dense.json", json.dumps(SPEC)))
    images, maps = folder / "images", folder / "maps"
    if not images.exists():
        image_folder(images)
        write_maps(maps)
        torch.manual_seed(0)
        model = vspec.build(vspec.from_dict(SPEC))
        vspec.save(model, folder / "dense.pt")
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(1e30)
        vspec.save(model, folder / "huge.pt")
        with torch.no_grad():
            next(model.parameters()).view(-1)[0] = float("nan")
        vspec.save(model, folder / "nan.pt")
    return spec, images, maps


def _label(model: Path, images: Path, out: Path, *extra: str) -> list[str]:
    return ["label", str(model), "--data", "imagefolder", "--data-dir", str(images), "--out", str(out), "--top-k", "2",
            "--grid", "6", "--device", "cpu", *extra]


def _train(spec: str, images: Path, out: Path, *extra: str) -> list[str]:
    return [spec, "--data", "imagefolder", "--data-dir", str(images), "--out", str(out), "--epochs", "1",
            "--batch-size", "2", "--device", "cpu", *extra]


# ---------------------------------------------------------------- image files
IMAGE_KINDS = (*(k for k in SPECIAL if k != "folder"), "random bytes", "truncated", "empty", "20,000 x 20,000 header")


def image_cases(folder: Path, n: int, seed: int = 0) -> Cases:
    """`n` image folders with one image a special file, random bytes, cut, empty or a decompression bomb, each
    read by `vspec label` (a training image) or `vspec train --data imagefolder` (with or without workers; a
    training or a validation image)."""
    rng = random.Random(seed)
    spec, images, _ = _setup(folder)
    good = (images / "train" / IMAGES[0]).read_bytes()
    cases = []
    for i, kind, d in _copies(images, folder / "image", IMAGE_KINDS, n):
        entry = rng.choice(["vspec", "train"])
        split = "train" if entry == "vspec" else rng.choice(["train", "val"])
        path = d / split / rng.choice(IMAGES)
        path.unlink()
        if kind in SPECIAL:
            special_file(path, kind)
        else:
            _write(path, {"random bytes": rng.randbytes(rng.randint(1, 2048)), "truncated": _cut(good, rng),
                          "empty": b"", "20,000 x 20,000 header": png_header(20_000, 20_000)}[kind])
        workers = ["--workers", "1" if i % 4 == 3 else "0"]  # a worker's error reaches the main process
        if entry == "vspec":
            argv = _label(folder / "dense.pt", d, folder / "out" / f"image{i}", *workers)
        else:
            argv = _train(spec, d, folder / "runs" / f"image{i}", *workers)
        cases.append((f"label image: {split} image {kind} ({'label' if entry == 'vspec' else 'train'}) #{i}", entry,
                      argv, NOTES))
    return cases


# ---------------------------------------------------------------- label maps
MAP_KINDS = (*SPECIAL, "random bytes", "truncated", "NaN score", "inf score", "class index 7", "shape (2, 2, 6, 4)",
             "a dict")


def _bad_map(path: Path, kind: str, rng: random.Random) -> None:
    import torch

    good = torch.load(path, weights_only=True)
    data = path.read_bytes()
    path.unlink()
    if kind in SPECIAL:
        special_file(path, kind)
    elif kind in ("random bytes", "truncated"):
        _write(path, rng.randbytes(rng.randint(1, 2048)) if kind == "random bytes" else _cut(data, rng))
    else:
        bad = good.clone()
        if kind.endswith("score"):
            bad[0, rng.randrange(2), rng.randrange(GRID[0]), rng.randrange(GRID[1])] = float(kind.split()[0].lower())
        elif kind.startswith("class"):
            bad[1, 0, 0, 0] = 7
        elif kind.startswith("shape"):
            bad = bad[..., :4].clone()
        torch.save({"map": bad} if kind == "a dict" else bad, path)


def map_cases(folder: Path, n: int, seed: int = 0) -> Cases:
    """`n` label folders with one map a special file, random bytes, cut, non-finite, of another class count or
    shape, or no tensor, each given to `vspec train --token-labels` (the first map, checked up front, or a later
    one, read during the epoch)."""
    rng = random.Random(seed)
    spec, images, maps = _setup(folder)
    cases = []
    for i, kind, d in _copies(maps, folder / "map", MAP_KINDS, n):
        name = rng.choice(IMAGES)
        _bad_map(d / (name.split(".", 1)[0] + ".pt"), kind, rng)
        argv = _train(spec, images, folder / "runs" / f"map{i}", "--token-labels", str(d), "--workers",
                      "1" if i % 4 == 3 else "0")
        cases.append((f"label map: {name} {kind} #{i}", "train", argv, NOTES))
    return cases


# ---------------------------------------------------------------- labels.json
RECORD_KINDS = (*SPECIAL, "an array", "a number", "null", "random bytes", "nested 100,000 deep", "over 1 MiB",
                "another data set")


def _bad_record(path: Path, kind: str, rng: random.Random) -> None:
    if kind in SPECIAL:
        special_file(path, kind)
        return
    other = {"data": "digits", "split": "train", "images": 1437, "classes": 10}
    _write(path, {"an array": b"[1, 2]", "a number": b"7", "null": b"null",
                  "random bytes": rng.randbytes(rng.randint(1, 2048)),
                  "nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
                  "over 1 MiB": b'{"a": "' + b"x" * 2**20 + b'"}',
                  "another data set": json.dumps(other).encode()}[kind])


def record_cases(folder: Path, n: int, seed: int = 0) -> Cases:
    """`n` label folders whose labels.json is a special file, no JSON object, nested or large beyond the bound, or
    names another data set, each read by a resumed `vspec label` or by `vspec train --token-labels`."""
    rng = random.Random(seed)
    spec, images, maps = _setup(folder)
    cases = []
    for i, kind, d in _copies(maps, folder / "record", RECORD_KINDS, n):
        _bad_record(d / "labels.json", kind, rng)
        entry = "train" if kind == "another data set" else rng.choice(["vspec", "train"])
        argv = _label(folder / "dense.pt", images, d) if entry == "vspec" else _train(
            spec, images, folder / "runs" / f"record{i}", "--token-labels", str(d))
        cases.append((f"labels.json: {kind} ({'label' if entry == 'vspec' else 'train'}) #{i}", entry, argv, NOTES))
    return cases


# ---------------------------------------------------------------- normalisation flags and overflowing scores
def flag_cases(folder: Path, n: int, seed: int = 0) -> Cases:
    """`n` command lines of `vspec label`, `vspec train` and `vspec eval` with a --mean / --std that float32 does
    not hold (alone, or as a pair whose normalised pixels overflow), a --grid beyond its bound, an empty --out;
    and `vspec label` with a checkpoint whose scores overflow (finite weights of 1e30) or hold NaN."""
    rng = random.Random(seed)
    spec, images, _ = _setup(folder)
    ckpt, huge, nan = folder / "dense.pt", folder / "huge.pt", folder / "nan.pt"
    flags = [["--mean", v] for v in ("1e308", "-1e39", "3.5e38", "nan", "inf")] + \
        [["--std", v] for v in ("1e-50", "1e-39", "1e39", "0", "-1", "nan")] + \
        [["--mean", "1e10", "--std", "1e-30"], ["--mean", "3e38", "--std", "0.5"], ["--mean", "0", "1e30", "0",
                                                                                     "--std", "1", "1e-10", "1"]]
    cases = []
    for i in range(n):
        what = ["flags", "flags", "label only", "scores"][i % 4]
        entry = rng.choice(["vspec", "train", "eval"]) if what == "flags" else "vspec"
        if what == "scores":
            model = [huge, nan][i // 4 % 2]
            argv = _label(model, images, folder / "out" / f"scores{i}")
            name = f"label scores: {model.name}"
        elif what == "label only":
            extra = rng.choice([["--grid", str(rng.choice([65, 10**6, 2**40]))], ["--grid", "6", "0"], ["--out="]])
            argv = _label(ckpt, images, folder / "out" / f"flags{i}", *extra)
            name = f"label flags: {' '.join(extra)} (label)"
        else:
            extra = rng.choice(flags)
            argv = {"vspec": _label(ckpt, images, folder / "out" / f"flags{i}", *extra),
                    "train": _train(spec, images, folder / "runs" / f"flags{i}", *extra),
                    "eval": [str(ckpt), "--data", "imagefolder", "--data-dir", str(images), "--device", "cpu",
                             *extra]}[entry]
            name = f"label flags: {' '.join(extra)} ({ {'vspec': 'label'}.get(entry, entry) })"
        cases.append((f"{name} #{i}", entry, argv, NOTES))
    return cases


def label_cases(folder: Path, n: int = 12, seed: int = 0) -> Cases:
    """Every class above, `n` draws each: (name, entry, argv, notes)."""
    folder.mkdir(parents=True, exist_ok=True)
    return [*image_cases(folder, n, seed), *map_cases(folder, n, seed), *record_cases(folder, n, seed),
            *flag_cases(folder, n, seed)]
