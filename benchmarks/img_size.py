"""Issue 24's new image sizes, measured: a DeiT-T-shaped model (specs/deit_tiny_cifar_p4.py: patch 4, width 192,
4 heads; `--depth` of its 12 blocks, 10 classes, 1 channel) trained at 32 px on the real MNIST digits (mnist5k,
4000 / 1000) by tools/train.py's engine (recipe none), then its checkpoint evaluated by tools/eval.py's code on
the 1000 validation digits at 32 px, and at other sizes after resampling (`eval.py --img-size`: the learned
position table bicubic, the class token kept; vspec.resample). For contrast, the same sizes with the table
resampled by nearest neighbour. (A model with dynamic_img_size gives the bicubic figures: tests/test_resample.py
holds it equal to the resampled model.) Evaluation is eval.py's at crop ratio 1, the training's transform (a plain
resize of the 28 px digit to the size): the digit fills the same part of the image at every size, and covers 1.5x
as many tokens per side at 48 px as at 32; the training loop validates with the same transform (recipe none).

    python -m benchmarks.img_size [--data mnist5k] [--depth 1] [--epochs 4] [--batch-size 32] [--lr 1e-3]
        [--warmup-epochs 1] [--device cpu|cuda] [--sizes 24 32 48] [--out DIR]

About 5 minutes of CPU time at the defaults (1 block, 4 epochs of 125 steps: a CPU-sized run; --depth 12 is
DeiT-T's depth).
"""

import argparse
import json
import time
from pathlib import Path

import attrs
import torch
import torch.nn.functional as F

import vspec
from vspec.cli.eval import eval_parser
from vspec.cli.train import main as train_main
from vspec.train.evaluate import evaluate_checkpoint
from vspec.weights.loading import load_checkpoint

from .common import ROOT, out_dir


def nearest(path: Path, size: int, out: Path) -> Path:
    """The checkpoint at `size` with its position table resampled by nearest neighbour, saved to `out`."""
    ckpt = load_checkpoint(path)
    spec = vspec.from_json(ckpt["spec"])
    new = attrs.evolve(spec, img_size=size)
    state = dict(ckpt["state_dict"])
    (h, w), (nh, nw), p = spec.grid, new.grid, spec.num_prefix_tokens
    table = state["pos_embed"]
    grid = table[:, p:].reshape(1, h, w, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(nh, nw), mode="nearest").permute(0, 2, 3, 1).reshape(1, nh * nw, -1)
    state["pos_embed"] = torch.cat((table[:, :p], grid), dim=1)
    model = vspec.build(new)
    model.load_state_dict(state)
    return vspec.save(model, out)


def evaluate(path: Path, data: str, device: str, size: int | None = None) -> float:
    argv = [str(path), "--data", data, "--device", device, "--crop-ratio", "1"]
    return evaluate_checkpoint(eval_parser().parse_args(argv + (["--img-size", str(size)] if size else [])))["top1"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="mnist5k")
    p.add_argument("--depth", type=int, default=1)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-epochs", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--sizes", type=int, nargs="+", default=[24, 32, 48])
    p.add_argument("--out", type=Path, default=out_dir() / "img_size",
                   help="the run, the resampled checkpoints and img_size.json (default: runs/benchmarks/img_size)")
    p.add_argument("--max-steps", type=int, help="smoke runs")
    args = p.parse_args()
    out = args.out
    train = [str(ROOT / "specs/deit_tiny_cifar_p4.py"), "--set", f"depth={args.depth}", "--set", "num_classes=10",
             "--set", "in_chans=1", "--data", args.data, "--epochs", str(args.epochs),
             "--batch-size", str(args.batch_size), "--lr", str(args.lr), "--warmup-epochs", str(args.warmup_epochs),
             "--device", args.device,
             "--seed", "0", "--out", str(out / "run"), "--overwrite"]
    train += ["--max-steps", str(args.max_steps)] if args.max_steps else []
    t0 = time.perf_counter()
    if train_main(train) != 0:
        raise SystemExit("training failed")
    trained = time.perf_counter() - t0
    ckpt = out / "run" / "last.pt"
    rows = []
    for size in args.sizes:
        bicubic = evaluate(ckpt, args.data, args.device, size)
        near = bicubic if size == 32 else evaluate(nearest(ckpt, size, out / f"nearest_{size}.pt"), args.data,
                                                   args.device)
        rows.append({"img_size": size, "top1_bicubic": bicubic, "top1_nearest": near})
    result = {"data": args.data, "depth": args.depth, "epochs": args.epochs, "batch_size": args.batch_size,
              "lr": args.lr, "warmup_epochs": args.warmup_epochs, "device": str(torch.device(args.device)),
              "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
              "torch": torch.__version__, "train_s": round(trained, 1), "trained_at": 32, "rows": rows}
    (out / "img_size.json").write_text(json.dumps(result, indent=1))
    print(f"DeiT-T shape (patch 4, width 192, 4 heads, {args.depth} blocks) trained at 32 px on {args.data}, "
          f"{args.epochs} epochs at batch {args.batch_size}, lr {args.lr}, {trained:.0f} s on "
          f"{result['device_name']}; val top-1 %:")
    print("| img_size | position table | top-1 (bicubic) | top-1 (nearest) |")
    print("|---|---|---|---|")
    for r in rows:
        how = "as trained" if r["img_size"] == 32 else "resampled"
        print(f"| {r['img_size']} | {how} | {r['top1_bicubic']:.1f} | {r['top1_nearest']:.1f} |")
    print(f"(JSON: {out / 'img_size.json'})")


if __name__ == "__main__":
    main()
