"""`vspec data pack --from-hf` (issue 61, item 6): a Hugging Face dataset, written here with `datasets` itself, packed
as vspec's shards: the rows' stored bytes and labels in a known order, the same shards as the same images packed
from an image folder, and `--data shards` training on them."""

import io
import json
import random
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.helpers.cli_corpus import run_case
from tests.helpers.hf_data import from_folder, hub_cache, offline, parquet
from tests.helpers.shard_corpus import hf_pack_cases
from tests.helpers.shard_runs import CLASSES, image_folder
from vspec.cli import main as vspec_main
from vspec.cli.train import main as train_main
from vspec.train import checkpoints
from vspec.train.data.pack import MANIFEST, pack

datasets = pytest.importorskip("datasets")


@pytest.fixture(autouse=True)
def _offline(tmp_path, monkeypatch):
    offline(monkeypatch, tmp_path)


def offline_home(tmp_path: Path) -> Path:
    return tmp_path / "hf_home"  # offline's HF_HOME


def rows_of(ds) -> list[tuple[bytes, int]]:
    """(stored bytes, label) of a split's rows, in row order."""
    raw = ds.cast_column("image", datasets.Image(decode=False))
    return [(row["image"]["bytes"], row["label"]) for row in raw]


def members(tar_path: Path) -> list[tuple[str, bytes]]:
    with tarfile.open(tar_path) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]


def read_back(out: Path, split: str) -> list[tuple[str, bytes, int]]:
    """(member suffix, image bytes, label) of a split's shards, in the manifest's order: read with tarfile alone."""
    manifest = json.loads((out / MANIFEST).read_text())
    got = []
    for shard in manifest[split]:
        pairs = members(out / shard["name"])
        assert [name for name, _ in pairs[1::2]] == [f"{len(got) + i:08d}.cls" for i in range(len(pairs) // 2)]
        got += [(name.split(".")[1], data, int(label)) for (name, data), (_, label) in zip(pairs[::2], pairs[1::2])]
    return got


def test_packed_shards_hold_the_rows_bytes_and_labels_in_a_known_order(tmp_path, capsys):
    """JPEG bytes (kept as they are) and a row written from pixels (`datasets` stores a PNG: kept as that PNG);
    training rows in random.Random(seed)'s shuffle of the row numbers, validation in row order; the classes the
    ClassLabel's names."""
    pixels = np.random.default_rng(1).integers(0, 256, (6, 5, 3), dtype=np.uint8)
    ds = from_folder(image_folder(tmp_path / "images", per_class=3, size=8))
    drawn = datasets.Dataset.from_dict({"image": [Image.fromarray(pixels)], "label": [2]},
                                       features=ds["train"].features)
    ds["validation"] = datasets.concatenate_datasets([ds["validation"], drawn])
    ds.save_to_disk(tmp_path / "saved")
    out = tmp_path / "out"
    assert vspec_main(["data", "pack", "--from-hf", str(tmp_path / "saved"), str(out), "--shard-size", "4",
                       "--seed", "7"]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"{out}: training 9 images in 3 shards, validation 4 images in 1 shard, 3 classes")
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["classes"] == list(CLASSES) and manifest["seed"] == 7 and manifest["shard_size"] == 4
    train, val = rows_of(ds["train"]), rows_of(ds["validation"])
    order = list(range(9))
    random.Random(7).shuffle(order)
    assert read_back(out, "train") == [("jpg", *train[i]) for i in order]
    assert read_back(out, "val") == [("jpg", *pair) for pair in val[:3]] + [("png", *val[3])]
    assert val[3][0].startswith(b"\x89PNG\r\n\x1a\n") and val[3][1] == 2
    assert (np.asarray(Image.open(io.BytesIO(val[3][0]))) == pixels).all()  # lossless: the very pixels


def test_the_same_images_packed_from_hf_or_from_a_folder_give_the_same_shards(tmp_path):
    """An image folder's files, in ImageFolder's order, as a saved dataset, as parquet files and in a Hub cache:
    packed with the default shard size and seed, byte for byte the folder's pack (so --data shards trains the
    same on either)."""
    images = image_folder(tmp_path / "images", per_class=8, size=8)
    ds = from_folder(images)
    ds.save_to_disk(tmp_path / "saved")
    hub_cache(offline_home(tmp_path), "someone/images", ds)
    pack(images, tmp_path / "folder_pack")
    want = {p.name: p.read_bytes() for p in (tmp_path / "folder_pack").iterdir()}
    assert len(want) == 8 + 2 + 1  # 24 training images in 8 shards of 3, 6 validation images in 2, the manifest
    for i, where in enumerate((tmp_path / "saved", parquet(ds, tmp_path / "parquet"), "someone/images")):
        assert vspec_main(["data", "pack", "--from-hf", str(where), str(tmp_path / f"pack{i}")]) == 0
        assert {p.name: p.read_bytes() for p in (tmp_path / f"pack{i}").iterdir()} == want, where


def test_data_shards_trains_on_a_pack_from_hf(tmp_path, tiny_spec, capsys):
    """The test split named as validation (--val-split), an integer label column (classes "0" to its largest), a
    training row written from pixels (a PNG member among the JPEGs): `vspec train --data shards` trains an epoch on
    the pack and validates on it, the images decoded on the host and by the device's decoder (here on the CPU)."""
    ds = from_folder(image_folder(tmp_path / "images", per_class=4), {"train": "train", "test": "val"})
    pixels = np.random.default_rng(2).integers(0, 256, (12, 12, 3), dtype=np.uint8)
    drawn = datasets.Dataset.from_dict({"image": [Image.fromarray(pixels)], "label": [1]},
                                       features=ds["train"].features)
    ds["train"] = datasets.concatenate_datasets([ds["train"].select(range(11)), drawn])  # 3 whole batches
    ds.cast_column("label", datasets.Value("int64")).save_to_disk(tmp_path / "saved")
    out = tmp_path / "out"
    assert vspec_main(["data", "pack", "--from-hf", str(tmp_path / "saved"), str(out), "--val-split", "test",
                       "--shard-size", "4"]) == 0
    assert json.loads((out / MANIFEST).read_text())["classes"] == ["0", "1", "2"]
    assert sorted(suffix for suffix, *_ in read_back(out, "train")) == ["jpg"] * 11 + ["png"]
    for decode in ("host", "device"):
        run = tmp_path / decode
        code = train_main([str(tiny_spec), "--data", "shards", "--data-dir", str(out), "--out", str(run),
                           "--batch-size", "4", "--device", "cpu", "--epochs", "1", "--workers", "0", "--decode-on",
                           decode])
        assert code == 0, capsys.readouterr().err[-2000:]
        metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [m["epoch"] for m in metrics if "val_loss" in m] == [1] and np.isfinite(metrics[-1]["val_loss"])
        assert checkpoints.load(run / "last.pt")["global_step"] == 3  # every training image read, the PNG too


HOSTILE = {  # what each case's one line says (tests/helpers/shard_corpus.py's hf_pack_cases), in pieces
    "no image column": ("hf: no Image columns", "--image-column NAME"),
    "row 4 holds bytes that are no image": ("hf: {d}: train row 4: not an image (its first bytes: b'%PDF-1.4 no ')",),
    "row 1 holds no image": ("hf: {d}: train row 1: holds no image (no bytes, no path)",),
    "row 3 holds an empty image": ("hf: {d}: train row 3: holds no image (empty bytes)",),
    "label -1 (ClassLabel's no label)": ("{d}: train row 2: label -1 is negative",),
    "a label missing": ("{d}: validation row 0: no label",),
    "an empty validation split": ("{d}", "validation", "no rows"),
    "a validation label past the training set's largest": ("{d}: validation row 2: label 7 is out of range",),
    "a row stored as a path to a FIFO": ("hf: {d}: train row 0: {fifo}: is a named pipe (FIFO), not an "
                                         "image file",),
    "OUT inside the dataset's folder": ("OUT {d}/shards is inside the dataset's folder {d}: write the shards to "
                                       "another folder",),
}


def test_a_dataset_pack_cannot_use_is_one_line_naming_what(tmp_path):
    """Each hostile case of the corpus, through `vspec data pack --from-hf`: exit 2 and its one line, naming the
    split and the row; nothing packed (no manifest), no hang at the FIFO."""
    cases = hf_pack_cases(tmp_path)
    assert {name.removeprefix("pack from hf: ") for name, *_ in cases} == set(HOSTILE)
    for name, entry, argv, _ in cases:
        outcome = run_case(argv, entry=entry, limit=60)
        assert outcome.clean and outcome.stderr.startswith("vspec data pack: error: "), (name, outcome)
        for piece in HOSTILE[name.removeprefix("pack from hf: ")]:
            assert piece.format(d=argv[3], fifo=tmp_path / "fifo.jpg") in outcome.stderr, (name, outcome.stderr)
        assert not (Path(argv[4]) / MANIFEST).exists()
