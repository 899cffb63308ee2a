"""vspec.train.data.device_decode.DevicePipeline on CPU tensors (the device path's code without a GPU): encoded JPEGs
in, the model's normalised input out; the flip rate, the erase rate, seeded draws, and evaluation's resize and centre
crop against the CPU path's build_transforms."""

import io

import numpy as np
import pytest
import torch
from PIL import Image
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from tests.helpers.stats import assert_rate
from vspec.train.data.device_decode import DevicePipeline
from vspec.train.data.sources import read_bytes
from vspec.train.data.transforms import build_transforms

CPU = torch.device("cpu")
MEAN = torch.tensor(IMAGENET_DEFAULT_MEAN).view(1, 3, 1, 1)
STD = torch.tensor(IMAGENET_DEFAULT_STD).view(1, 3, 1, 1)
LEVEL = 1 / (255 * STD)  # one 8-bit level in normalised units, per channel (0.0171..0.0175)


def _jpeg(tmp_path, name: str, img: np.ndarray) -> torch.Tensor:
    path = tmp_path / f"{name}.jpg"
    Image.fromarray(img).save(path, "JPEG", quality=90)
    return read_bytes(str(path))


def _gradient(h: int = 40, w: int = 56) -> np.ndarray:
    """Grey, dark on the left and bright on the right."""
    row = np.linspace(0, 255, w).round().astype(np.uint8)
    return np.repeat(np.repeat(row[None, :, None], h, 0), 3, 2)


def _natural(h: int, w: int, seed: int = 0) -> np.ndarray:
    """Smooth colour waves, noise and a sharp-edged block: a misplaced or misscaled crop shows."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.stack([128 + 90 * np.sin(9 * xx + 4 * yy + c) for c in range(3)], -1) + rng.normal(0, 12, (h, w, 3))
    img[h // 4: h // 2, w // 3: w // 2] = [220, 40, 60]
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def gradients(tmp_path_factory):
    return [_jpeg(tmp_path_factory.mktemp("gradient"), "g", _gradient())] * 2000


def test_flip_rate_is_one_half(gradients):
    """Training with random resized crops (colour jitter 0.4, no RandAugment, no erasing) on 2000 copies of a
    left-dark / right-bright image: the output's left half is the brighter one (flipped) in half the samples,
    within 5 sigma (+-0.056). The crops keep the gradient's direction and the jitter keeps its order, so the
    halves tell a flip; ties (a crop clipped flat by the jitter) are rare and left out. A broken pipeline fails:
    no flip or always (rate 0 or 1), one draw for the whole batch (0 or 1), a vertical flip (no change: 0)."""
    pipe = DevicePipeline((16, 16), 3, CPU, random_resized_crop=True)
    x = pipe(gradients, train=True, g=torch.Generator().manual_seed(0))
    assert x.shape == (2000, 3, 16, 16) and x.dtype == torch.float32
    left, right = x[..., :8].mean((1, 2, 3)), x[..., 8:].mean((1, 2, 3))
    decided = left != right
    assert decided.float().mean() > 0.99
    assert_rate(int((left > right)[decided].sum()), int(decided.sum()), 0.5, "horizontal flips")


def test_augmented_output_and_erase_rate(gradients):
    """With RandAugment ('rand-m9-mstd0.5-inc1') and erasing at 0.25: (N, 3, h, w) float32 for a non-square size,
    finite, inside the normalised range of 0..255 pixels; erased samples (a rectangle of exact zeros in every
    channel: normalised whole pixel values are never 0) at rate 0.25 within 5 sigma. The same generator seed
    gives the same batch; another seed another. A broken pipeline fails: erasing before normalisation (the box
    would read -mean / std, not 0), erasing every sample or none, draws from the global generator."""
    pipe = DevicePipeline((12, 20), 3, CPU, random_resized_crop=True, auto_augment="rand-m9-mstd0.5-inc1",
                          re_prob=0.25)
    x = pipe(gradients, train=True, g=torch.Generator().manual_seed(1))
    assert x.shape == (2000, 3, 12, 20) and x.dtype == torch.float32 and torch.isfinite(x).all()
    lo, hi = (0 - 255 * MEAN) / (255 * STD), (255 - 255 * MEAN) / (255 * STD)
    assert (x >= lo - 1e-5).all() and (x <= hi + 1e-5).all()
    zero = (x == 0).all(1)  # (N, H, W)
    assert ((x == 0).any(1) == zero).all()
    for m in zero[zero.flatten(1).any(1)][:50]:  # each erased sample: one full rectangle
        rows, cols = m.any(1).nonzero()[:, 0], m.any(0).nonzero()[:, 0]
        assert m.sum() == len(rows) * len(cols) == (rows[-1] - rows[0] + 1) * (cols[-1] - cols[0] + 1)
    assert_rate(int(zero.flatten(1).any(1).sum()), len(x), 0.25, "erased samples")
    few = gradients[:64]
    a, b = (pipe(few, train=True, g=torch.Generator().manual_seed(s)) for s in (7, 7))
    assert torch.equal(a, b)
    assert not torch.equal(a, pipe(few, train=True, g=torch.Generator().manual_seed(8)))


EVAL_BOUND = 0.01  # mean |diff| in normalised units, about 0.57 of an 8-bit level


@pytest.mark.parametrize("size", [(32, 32), (24, 40), (40, 24)])
def test_eval_matches_cpu_path(tmp_path, size):
    """Evaluation (train=False: resize to size / 0.875 keeping the aspect, centre crop) on JPEGs of several shapes
    (wider, taller, square, smaller than the crop, larger) against build_transforms(train=False,
    crop_ratio=0.875) on the PIL image of the same file. Both decode with libjpeg-turbo (the same pixels here) and
    resize with an antialiased bicubic filter (torch's in float, PIL's in fixed point), so values differ by
    rounding only: measured mean |diff| 0.002..0.004 and at most one level. The bound, EVAL_BOUND (0.01) and two
    levels, leaves room for another decoder build; a bilinear resize measures 0.013..0.018 on these images, a crop
    misplaced or scaled 0.15 and more, the whole image uncropped 0.5 and more, a wrong mean or std far more."""
    for k, hw in enumerate([(60, 80), (90, 50), (33, 33), (24, 28), (120, 200)]):
        data = _jpeg(tmp_path, f"n{k}", _natural(*hw, seed=k))
        ours = DevicePipeline(size, 3, CPU)([data], train=False)
        ref = build_transforms(size, 3, train=False, crop_ratio=0.875)(Image.open(io.BytesIO(bytes(data.numpy()))))
        assert ours.shape == (1, 3, *size) and ref.shape == (3, *size)
        diff = (ours - ref[None]).abs()
        assert diff.mean() < EVAL_BOUND, f"{hw} -> {size}: mean |diff| {diff.mean():.4f}"
        assert (diff / LEVEL).max() <= 2 + 1e-3, f"{hw} -> {size}: up to {(diff / LEVEL).max():.2f} levels off"


def _epoch(folder, workers: int, skip: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first epoch's training batches of a run decoding in its loader's workers (--decode-in workers),
    from batch `skip` on (a mid-epoch resume's start)."""
    from vspec import load_spec, override
    from vspec.train import DataConfig, RunConfig, TrainConfig
    from vspec.train.engine import Training
    from vspec.train.recipes import resolve

    spec = override(load_spec("deit_tiny"), {"depth": 1, "img_size": [16, 16], "num_classes": 3})
    cfg = TrainConfig(spec, resolve("deit", epochs=1, batch_size=4), DataConfig("imagefolder", data_dir=str(folder)),
                      RunConfig(out=folder / "run", workers=workers, decode_on="device", decode_in="workers",
                                device="cpu"))
    t = Training(cfg)
    t.setup(model=False)
    t.state.skip_batches = skip
    t.start_epoch_data(0)
    assert t.task.in_workers
    return list(t.task.batches(t.loaders.train, True, 0, skip))


def test_decoding_in_the_workers_draws_by_the_samples(tmp_path):
    """WorkerPipeline seeds each batch from its samples (and the run's seed and rank), not from the worker that
    makes it: one worker or two give the same batches, and a resume from batch 2 gives the rest of them. A
    pipeline seeded per worker, or from a counter, gives other batches with another worker count or after the
    skip."""
    for split, n in (("train", 16), ("val", 3)):
        for i in range(n):
            folder = tmp_path / split / f"c{i % 3}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(_natural(20 + i % 5, 24 + i % 7, seed=i)).save(folder / f"{i}.jpg", quality=90)
    one, two = _epoch(tmp_path, 1), _epoch(tmp_path, 2)
    assert len(one) == len(two) == 4
    for (x1, y1), (x2, y2) in zip(one, two):
        assert x1.shape == (4, 3, 16, 16) and torch.equal(x1, x2) and torch.equal(y1, y2)
    assert not torch.equal(one[0][0], one[1][0])
    rest = _epoch(tmp_path, 2, skip=2)
    assert len(rest) == 2 and all(torch.equal(a[0], b[0]) for a, b in zip(rest, one[2:]))


def test_the_training_process_decodes_unless_the_workers_are_asked_to(tmp_path):
    """--decode-on device: by default the loader's workers only read the files (`collate_encoded`: no CUDA context,
    no nvJPEG of their own) and the training process decodes; --decode-in workers hands the decoding to them."""
    from vspec import load_spec, override
    from vspec.train import DataConfig, RunConfig, TrainConfig
    from vspec.train.data.device_decode import WorkerPipeline, collate_encoded
    from vspec.train.engine import Training
    from vspec.train.recipes import resolve

    for i in range(8):
        for split in ("train", "val"):
            folder = tmp_path / split / f"c{i % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(_natural(20, 24, seed=i)).save(folder / f"{i}.jpg", quality=90)
    spec = override(load_spec("deit_tiny"), {"depth": 1, "img_size": [16, 16], "num_classes": 2})
    for asked, collate in (("auto", collate_encoded), ("main", collate_encoded), ("workers", WorkerPipeline)):
        cfg = TrainConfig(spec, resolve("none", epochs=1, batch_size=4), DataConfig("imagefolder", data_dir=tmp_path),
                          RunConfig(out=tmp_path / asked, workers=0, decode_on="device", decode_in=asked,
                                    device="cpu"))
        t = Training(cfg)
        t.setup(model=False)
        assert t.task.in_workers == (asked == "workers")
        assert t.loaders.train.collate_fn is collate or isinstance(t.loaders.train.collate_fn, collate)


def test_decoding_in_the_workers_is_for_a_folder(tmp_path, capsys):
    """--decode-in workers on shards (whose workers read their shards in order, not samples by index) is one line
    and exit 2; the folder's run takes it."""
    from tests.helpers.shard_runs import packed
    from vspec.cli.train import main as train_main

    data = packed(tmp_path)
    argv = ["deit_tiny", "--set", "depth=1", "--set", "img_size=[16,16]", "--data", "shards", "--data-dir", str(data),
            "--out", str(tmp_path / "run"), "--device", "cpu", "--batch-size", "4", "--decode-on", "device",
            "--decode-in", "workers"]
    assert train_main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "train.py: error: --decode-in workers: for --data imagefolder (shards's workers read their shards in "
        "order; --decode-in main)"]
