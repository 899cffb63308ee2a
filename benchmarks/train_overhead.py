"""The cost of tools/train.py's machinery: images/s of the training loop (vspec.train.engine, the
code behind tools/train.py: data loading and transforms, loss, AdamW, cosine schedule, progress,
metrics) on deit_tiny against a bare forward + backward + AdamW-step loop on the same model, batch 32,
224 px, synthetic data, CPU, recipe `none`. Both run the same number of steps (after one warm-up
step each) in this process; the overhead is 1 - engine / bare.

    python benchmarks/train_overhead.py [--steps 6] [--batch-size 32]
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


def bare(spec, steps: int, batch: int) -> float:
    """Images/s of forward + backward + AdamW step on one fixed batch, after one warm-up step."""
    torch.manual_seed(0)
    model = vspec.build(spec).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    x, y = torch.randn(batch, 3, *spec.img_size), torch.randint(0, spec.num_classes, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * batch / (time.perf_counter() - t0)


def engine(spec, steps: int, batch: int) -> float:
    """Images/s that the training loop itself reports for its first epoch (steps + 1 warm-up step,
    the warm-up step's time excluded by timing steps 2..n from the metrics of a second run)."""
    with tempfile.TemporaryDirectory() as tmp:
        times = {}
        for n in (1, steps + 1):
            cfg = TrainConfig(spec=spec, recipe=resolve("none", epochs=1, batch_size=batch), data="synthetic",
                              out=Path(tmp) / f"run{n}", synthetic_size=batch * (steps + 1), device="cpu",
                              max_steps=n, log_every=10**9)
            run(cfg)
            record = json.loads((Path(tmp) / f"run{n}" / "metrics.jsonl").read_text().splitlines()[-1])
            times[n] = record["epoch_time_s"]
        return steps * batch / (times[steps + 1] - times[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    spec = vspec.load_spec(ROOT / "specs/deit_tiny.py")
    spec = vspec.override(spec, {"num_classes": 10})
    b = bare(spec, args.steps, args.batch_size)
    e = engine(spec, args.steps, args.batch_size)
    print(f"deit_tiny (10 classes), batch {args.batch_size}, 224 px, CPU, {torch.get_num_threads()} threads, "
          f"{args.steps} timed steps each")
    print(f"bare forward+backward+AdamW loop: {b:7.1f} img/s")
    print(f"tools/train.py training loop:     {e:7.1f} img/s")
    print(f"overhead: {100 * (1 - e / b):.1f} %")


if __name__ == "__main__":
    main()
