"""The cost of tools/train.py's machinery: images/s of the training loop (vspec.train.engine, the
code behind tools/train.py: data loading and transforms, loss, AdamW, cosine schedule, progress,
metrics) on deit_tiny against a bare forward + backward + AdamW-step loop on the same model, batch 32,
224 px, recipe `none`. Both run the same number of steps in this process: the bare loop after three warm-up
steps, the training loop in its second epoch (the first warms the workers and the model); the overhead is
1 - engine / bare. `--data synthetic` (decoded tensors: the model is what is timed) or
`imagefolder` (JPEGs generated here, 256 px, decoded and transformed by the loop's workers: the data path is
timed too). Both in the bare step's precision: fp32 on the CPU (the loop's `--precision fp32`, whatever auto
would pick on a CPU with native bf16); `--device cuda`: both on the GPU, the bare step under bf16 autocast with
channels-last images as the loop's `--precision auto` runs them.

Beside each loop rate, its data path alone (the loop's loader and the task's `prepare`, no model): where the loop
falls short of the bare step, whether the data is why.

    python -m benchmarks.train_overhead [--steps 6] [--batch-size 32] [--device cpu|cuda]
                                        [--data synthetic|imagefolder|both] [--workers N]
                                        [--normalise-on auto|host|device] [--json FILE]
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

import vspec
from vspec.train import DataConfig, RunConfig, TrainConfig
from vspec.train.engine import Training, run
from vspec.train.recipes import resolve

from .common import ROOT, bare_step, sync, write_json


def bare(spec, steps: int, batch: int, device: str = "cpu") -> float:
    """Images/s of forward + backward + AdamW step on one fixed batch, after three warm-up steps."""
    step = bare_step(spec, batch, device)
    for _ in range(3):  # warm-up: allocator, cuDNN / cuBLAS choices
        step()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return steps * batch / (time.perf_counter() - t0)


def jpeg_folder(root: Path, images: int, classes: int = 10, side: int = 256) -> Path:
    """An ImageFolder of generated JPEGs (DIR/train/<class>/*.jpg and DIR/val), noise-textured."""
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    for split, n in (("train", max(classes, images)), ("val", max(classes, images // 10))):
        for i in range(n):
            folder = root / split / f"class{i % classes}"
            folder.mkdir(parents=True, exist_ok=True)
            pixels = torch.randint(0, 256, (side, side, 3), generator=g, dtype=torch.uint8).numpy()
            Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=90)
    return root


def _data(name: str, data_dir: Path | None, size: int) -> DataConfig:
    return DataConfig(name, data_dir=data_dir, synthetic_size=size)


def engine(spec, steps: int, batch: int, device: str = "cpu", data: str = "synthetic", workers: int | None = None,
           data_dir: Path | None = None, normalise_on: str = "auto") -> float:
    """Images/s that the training loop itself reports for the second of two epochs of `steps` batches: the
    workers (persistent) and the model are warm, so the figure is the loop's steady rate, not its start."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig(spec, resolve("none", epochs=2, batch_size=batch), _data(data, data_dir, batch * steps),
                          RunConfig(out=Path(tmp) / "run", device=device, workers=workers, log_interval=None,
                                    normalise_on=normalise_on, precision="auto" if device == "cuda" else "fp32"))
        run(cfg)
        records = [json.loads(line) for line in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
        return records[1]["images_per_s"]


def loader(spec, steps: int, batch: int, device: str = "cpu", data: str = "synthetic", workers: int | None = None,
           data_dir: Path | None = None, normalise_on: str = "auto") -> float:
    """Images/s of the loop's data path alone: its train loader's batches (same datasets, transforms, workers)
    made ready on the device by the task (`Training.batches`: moved, normalised there where asked), no model; the
    first batch (the workers' start) excluded."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig(spec, resolve("none", epochs=1, batch_size=batch), _data(data, data_dir, batch * steps),
                          RunConfig(out=Path(tmp) / "run", device=device, workers=workers, normalise_on=normalise_on))
        t = Training(cfg)
        t.setup(model=False)
        batches = t.batches(0, ahead=False)
        next(batches)
        t0 = time.perf_counter()
        n = 0
        for _ in batches:
            n += 1
        sync(device)
        return n * batch / (time.perf_counter() - t0)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--data", choices=("synthetic", "imagefolder", "both"), default="synthetic")
    ap.add_argument("--workers", type=int, default=None, help="the loop's data workers (default: its own)")
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--normalise-on", choices=("auto", "host", "device"), default="auto",
                    help="the loop's --normalise-on (auto: device on CUDA)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    if args.steps < 2:
        ap.error("--steps must be >= 2 (the data path's rate skips the first batch)")
    spec = vspec.load_spec(ROOT / "specs/deit_tiny.py")
    spec = vspec.override(spec, {"num_classes": 10, "img_size": [args.img_size, args.img_size]})
    b = bare(spec, args.steps, args.batch_size, args.device)
    print(f"deit_tiny (10 classes), batch {args.batch_size}, {args.img_size} px, {args.device}, "
          f"{torch.get_num_threads()} threads, {args.steps} timed steps each")
    print(f"bare forward+backward+AdamW loop: {b:7.1f} img/s")
    out = {"device": args.device, "batch": args.batch_size, "img_size": args.img_size, "bare": b,
           "normalise_on": args.normalise_on}
    workers = {} if args.workers is None else {"workers": args.workers}
    for data in (("synthetic", "imagefolder") if args.data == "both" else (args.data,)):
        with tempfile.TemporaryDirectory() as tmp:
            folder = jpeg_folder(Path(tmp), args.batch_size * args.steps) if data == "imagefolder" else None
            e = engine(spec, args.steps, args.batch_size, args.device, data, data_dir=folder,
                       normalise_on=args.normalise_on, **workers)
            fed = loader(spec, args.steps, args.batch_size, args.device, data, data_dir=folder,
                         normalise_on=args.normalise_on, **workers)
        out[data] = {"loop": e, "overhead": 1 - e / b, "data_path": fed}
        print(f"tools/train.py training loop ({data}): {e:7.1f} img/s, overhead {100 * (1 - e / b):.1f} %; "
              f"its data path alone {fed:7.1f} img/s")
    if args.json:
        write_json(args.json, out)
    return out


if __name__ == "__main__":
    main()
