"""The cost of tools/train.py's machinery: images/s of the training loop (vspec.train.engine, the
code behind tools/train.py: data loading and transforms, loss, AdamW, cosine schedule, progress,
metrics) on deit_tiny against a bare forward + backward + AdamW-step loop on the same model, batch 32,
224 px, recipe `none`. Both run the same number of steps (after one warm-up step each) in this process;
the overhead is 1 - engine / bare. `--data synthetic` (decoded tensors: the model is what is timed) or
`imagefolder` (JPEGs generated here, 256 px, decoded and transformed by the loop's workers: the data path is
timed too). `--device cuda`: both on the GPU, the bare step under bf16 autocast with channels-last images as
the loop's `--precision auto` runs them.

    python benchmarks/train_overhead.py [--steps 6] [--batch-size 32] [--device cpu|cuda]
                                        [--data synthetic|imagefolder] [--workers N] [--json FILE]
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

import vspec
from vspec.train.engine import TrainConfig, run
from vspec.train.recipes import resolve

ROOT = Path(__file__).resolve().parents[1]


def bare(spec, steps: int, batch: int, device: str = "cpu") -> float:
    """Images/s of forward + backward + AdamW step on one fixed batch, after one warm-up step."""
    torch.manual_seed(0)
    cuda = device == "cuda"
    model = vspec.build(spec).train().to(device)
    x, y = torch.randn(batch, 3, *spec.img_size, device=device), torch.randint(0, spec.num_classes, (batch,),
                                                                                device=device)
    if cuda:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    return steps * batch / (time.perf_counter() - t0)


def jpeg_folder(root: Path, images: int, classes: int = 10, side: int = 256) -> Path:
    """An ImageFolder of generated JPEGs (DIR/train/<class>/*.jpg and DIR/val), noise-textured."""
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    for split, n in (("train", images), ("val", max(classes, images // 10))):
        for i in range(n):
            folder = root / split / f"class{i % classes}"
            folder.mkdir(parents=True, exist_ok=True)
            pixels = torch.randint(0, 256, (side, side, 3), generator=g, dtype=torch.uint8).numpy()
            Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=90)
    return root


def engine(spec, steps: int, batch: int, device: str = "cpu", data: str = "synthetic", workers: int = 0,
           data_dir: Path | None = None) -> float:
    """Images/s that the training loop itself reports for its first epoch (steps + 1 warm-up step,
    the warm-up step's time excluded by timing steps 2..n from the metrics of a second run)."""
    with tempfile.TemporaryDirectory() as tmp:
        times = {}
        for n in (1, steps + 1):
            cfg = TrainConfig(spec=spec, recipe=resolve("none", epochs=1, batch_size=batch), data=data,
                              data_dir=str(data_dir) if data_dir else None, out=Path(tmp) / f"run{n}",
                              synthetic_size=batch * (steps + 1), device=device, workers=workers, max_steps=n,
                              log_every=10**9)
            run(cfg)
            record = json.loads((Path(tmp) / f"run{n}" / "metrics.jsonl").read_text().splitlines()[-1])
            times[n] = record["epoch_time_s"]
        return steps * batch / (times[steps + 1] - times[1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--data", choices=("synthetic", "imagefolder", "both"), default="synthetic")
    ap.add_argument("--workers", type=int, default=None, help="the loop's data workers (default: its own)")
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    spec = vspec.load_spec(ROOT / "specs/deit_tiny.py")
    spec = vspec.override(spec, {"num_classes": 10, "img_size": [args.img_size, args.img_size]})
    b = bare(spec, args.steps, args.batch_size, args.device)
    print(f"deit_tiny (10 classes), batch {args.batch_size}, {args.img_size} px, {args.device}, "
          f"{torch.get_num_threads()} threads, {args.steps} timed steps each")
    print(f"bare forward+backward+AdamW loop: {b:7.1f} img/s")
    out = {"device": args.device, "batch": args.batch_size, "img_size": args.img_size, "bare": b}
    workers = {} if args.workers is None else {"workers": args.workers}
    for data in (("synthetic", "imagefolder") if args.data == "both" else (args.data,)):
        with tempfile.TemporaryDirectory() as tmp:
            folder = jpeg_folder(Path(tmp), args.batch_size * (args.steps + 1)) if data == "imagefolder" else None
            e = engine(spec, args.steps, args.batch_size, args.device, data, data_dir=folder, **workers)
        out[data] = {"loop": e, "overhead": 1 - e / b}
        print(f"tools/train.py training loop ({data}): {e:7.1f} img/s, overhead {100 * (1 - e / b):.1f} %")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
