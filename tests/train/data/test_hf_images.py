"""--data hf for an image model (issue 61, item 1 and its "done when"): `vspec train deit_tiny --data hf` on a
saved dataset, on its parquet files and on a Hub cache trains and evaluates to the figures of the same images as an
ImageFolder (same seed, the same pixels: the very files' bytes), on the host and decoded on the device; the splits,
columns and labels the loader chooses and refuses."""

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms

from tests.helpers.hf_data import from_folder, hub_cache, offline, parquet
from tests.helpers.shard_runs import image_folder
from vspec.cli.eval import main as eval_main
from vspec.cli.train import main as train_main
from vspec.train.data.registry import DataError
from vspec.train.data.sources import build_datasets

datasets = pytest.importorskip("datasets")  # the `hf` extra, which `make test` installs
SHRINK = ("--set", "depth=1", "--set", "dim=32", "--set", "block.attention.heads=2", "--set", "img_size=16",
          "--set", "num_classes=3")


@pytest.fixture
def images(tmp_path, monkeypatch):
    """An image folder of 3 classes (8 training JPEGs each, 2 for validation; one a PNG), offline HF caches in
    tmp, and the folder's files as a save_to_disk DatasetDict (`disk`), its parquet files (`pq`) and a filled Hub
    cache (someone/pets)."""
    home = offline(monkeypatch, tmp_path)
    folder = image_folder(tmp_path / "images", per_class=8, size=12)
    png = folder / "train" / "bee" / "003.jpg"
    buffer = io.BytesIO()
    Image.open(png).save(buffer, "PNG")  # a non-JPEG: PIL reads it on the host, torchvision on the device
    png.write_bytes(buffer.getvalue())
    dd = from_folder(folder)
    dd.save_to_disk(str(tmp_path / "disk"))
    parquet(dd, tmp_path / "pq")
    hub_cache(home, "someone/pets", dd)
    return folder


def train(tmp_path, data, where, name, *extra):
    out = tmp_path / "runs" / name
    argv = ["deit_tiny", *SHRINK, "--data", data, "--data-dir", str(where), "--out", str(out), "--epochs", "1",
            "--batch-size", "8", "--device", "cpu", "--seed", "3", *extra]
    assert train_main(argv) == 0
    return json.loads((out / "metrics.jsonl").read_text().splitlines()[0]), out


def evaluate(capsys, checkpoint, data, where) -> dict:
    capsys.readouterr()
    assert eval_main([str(checkpoint), "--data", data, "--data-dir", str(where), "--device", "cpu", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


FIGURES = ("train_loss", "val_loss", "val_top1", "val_top5")


@pytest.mark.parametrize("decode_on", ["host", "device"])
def test_the_same_images_train_and_evaluate_alike_saved_parquet_and_cached(tmp_path, images, capsys, decode_on):
    ref, ref_out = train(tmp_path, "imagefolder", images, "folder", "--decode-on", decode_on)
    assert all(np.isfinite(ref[k]) for k in FIGURES)
    for where in (tmp_path / "disk", tmp_path / "pq", "someone/pets"):
        got, out = train(tmp_path, "hf", where, str(where).replace("/", "_"), "--decode-on", decode_on)
        assert all(abs(got[k] - ref[k]) <= 1e-6 for k in FIGURES), (where, got, ref)
        if decode_on == "host":  # vspec eval reads the validation split as the run did
            theirs = evaluate(capsys, out / "best.pt", "hf", where)
            ours = evaluate(capsys, ref_out / "best.pt", "imagefolder", images)
            assert abs(theirs["loss"] - ours["loss"]) <= 1e-6 and theirs["top1"] == ours["top1"], where
            assert theirs["images"] == ours["images"] == 6


def test_a_resumed_run_keeps_its_data_options(tmp_path, images, capsys):
    _, out = train(tmp_path, "hf", tmp_path / "pq", "pq", "--image-column", "image")
    code = train_main(["deit_tiny", *SHRINK, "--data", "hf", "--data-dir", str(tmp_path / "pq"), "--out", str(out),
                       "--epochs", "2", "--batch-size", "8", "--device", "cpu", "--seed", "3", "--resume"])
    assert code == 2 and "--image-column (none) != image" in capsys.readouterr().err


def read(where, **options):
    """--data hf's splits at `where`, the images' exact pixels (uint8 tensors)."""
    raw = transforms.PILToTensor()
    return build_datasets("hf", img_size=4, in_chans=3, train_transform=raw, eval_transform=raw, data_dir=str(where),
                          **options)


def saved(tmp_path, name="ds", **splits):
    """A save_to_disk DatasetDict of `splits` (name: dict of columns), returned as its folder."""
    dd = datasets.DatasetDict({s: datasets.Dataset.from_dict(c) if isinstance(c, dict) else c
                               for s, c in splits.items()})
    dd.save_to_disk(str(tmp_path / name))
    return tmp_path / name


def png(value: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((4, 4, 3), value, np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def image_split(labels, features=None, image=png):
    images = [{"bytes": image(i) if callable(image) else image, "path": None} for i in range(len(labels))]
    features = features or datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    return datasets.Dataset.from_dict({"image": images, "label": labels}, features=features)


def test_integer_labels_count_their_classes_and_the_validation_split_falls_back_to_test(tmp_path, monkeypatch):
    offline(monkeypatch, tmp_path)
    where = saved(tmp_path, train=image_split([0, 4, 2, 1]), test=image_split([3, 0]))
    train_ds, val_ds, classes = read(where)
    assert classes == 5 and len(train_ds) == 4 and len(val_ds) == 2
    assert [label for _, label in val_ds] == [3, 0]
    assert torch.equal(val_ds[1][0], torch.full((3, 4, 4), 1, dtype=torch.uint8))  # test's row 1: png(1)
    both = saved(tmp_path, "both", train=image_split([0, 1]), validation=image_split([1]), test=image_split([0, 0]))
    assert len(read(both)[1]) == 1 and len(read(both, split="test")[1]) == 2
    with pytest.raises(DataError, match=r"--val-split dev: not a split to validate on \(its splits: train, "
                                        r"validation, test;"):
        read(both, split="dev")
    only = saved(tmp_path, "only", train=image_split([0, 1]))
    with pytest.raises(DataError, match=r": no validation split \(its splits: train; a run trains on train"):
        read(only)


def test_named_columns_are_read(tmp_path, monkeypatch):
    offline(monkeypatch, tmp_path)
    features = datasets.Features({"a": datasets.Image(), "b": datasets.Image(), "y": datasets.Value("int32"),
                                  "z": datasets.Value("int32")})
    split = datasets.Dataset.from_dict({"a": [{"bytes": png(10), "path": None}] * 2,
                                        "b": [{"bytes": png(200), "path": None}] * 2, "y": [0, 1], "z": [5, 6]},
                                       features=features)
    where = saved(tmp_path, train=split, validation=split)
    train_ds, _, classes = read(where, image_column="b", label_column="z")
    assert classes == 7 and [label for _, label in train_ds] == [5, 6]
    assert torch.equal(train_ds[0][0], torch.full((3, 4, 4), 200, dtype=torch.uint8))  # b's image, not a's


@pytest.mark.parametrize("labels, message", [
    ([0, None, 1], r"train row 1: no label \(null in column 'label'\)$"),
    ([0, -1, 1], r"train row 1: label -1 is negative \(ClassLabel's -1 is 'no label'"),
    ([0, 1, 3], r"train row 2: label 3 is out of range: the classes are 0 to 2$"),
])
def test_a_bad_label_is_one_line_naming_its_row(tmp_path, monkeypatch, labels, message):
    """ClassLabel(names=[a, b, c]) over these labels: datasets refuses 3 as it writes them, so the split is written
    with integers and its dataset_info.json then says ClassLabel (a lying one)."""
    offline(monkeypatch, tmp_path)
    where = saved(tmp_path, train=image_split(labels), validation=image_split([0]))
    for split in ("train", "validation"):
        info = json.loads((where / split / "dataset_info.json").read_text())
        info["features"]["label"] = {"names": ["a", "b", "c"], "_type": "ClassLabel"}
        (where / split / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(DataError, match=message):
        read(where)


def test_an_unreadable_image_names_its_row_when_read_and_an_empty_split_is_refused(tmp_path, monkeypatch):
    offline(monkeypatch, tmp_path)
    where = saved(tmp_path, train=image_split([0, 1, 0], image=lambda i: png(i) if i != 2 else b"<html>no</html>"),
                  validation=image_split([1]))
    train_ds, _, _ = read(where)
    train_ds[1]
    with pytest.raises(DataError, match=rf"^hf: {where}: train row 2: not an image file PIL reads"):
        train_ds[2]
    empty = saved(tmp_path, "empty", train=image_split([0, 1]), validation=image_split([]))
    with pytest.raises(DataError, match=rf"^hf: {empty}/validation: the split has no rows"):
        read(empty)
    empty = saved(tmp_path, "filtered", train=image_split([0, 1]), validation=image_split([0, 1]).filter(lambda r: 0))
    with pytest.raises(DataError, match=rf"^hf: {empty}: validation: the split has no rows$"):
        read(empty)
