"""A CPU training step with freed activations kept on glibc's heap (`vspec.train.heap`, what `vspec train` runs
under on the CPU) against glibc's steady state (blocks of 32 MiB up mapped fresh and returned), in one process.

Per model and precision, forward+backward steps (benchmarks/common.py's `forward_backward`, train mode) run with
the heap kept and with glibc's steady state (`set_heap`, which gives the heap's free memory back on switching to
it), back to back in every round (order alternating); printed: each side's ms per step (median) and the median of
the rounds' default/kept ratios (> 1: keeping wins) with their range.

    python -m benchmarks.heap [--models swin_tiny deit_tiny] [--precision fp32 bf16] [--rounds 7] [--threads N]
"""

import argparse
import statistics
import time

import torch

import vspec
from vspec.train.heap import set_heap

from .common import ROOT, autocast, forward_backward, header, precisions
from .models import PAIRS


def timed(model, x, precision: str, kept: bool, steps: int = 2) -> float:
    """Seconds per step under the heap mode `kept`, after one step that settles it."""
    set_heap(kept)
    with autocast(precision):
        forward_backward(model, x)
        t0 = time.perf_counter()
        for _ in range(steps):
            forward_backward(model, x)
    return (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--models", nargs="+", choices=sorted(PAIRS), default=["swin_tiny", "deit_tiny"])
    ap.add_argument("--precision", nargs="+", choices=("fp32", "bf16"), default=None,
                    help="default: fp32 and bf16 where the CPU computes bf16 natively, else fp32")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    run = precisions(args.precision)
    header({}, run)
    if not set_heap(False):
        raise SystemExit("this C library is not glibc (or this is not Linux): there is no heap mode to compare")
    for name in args.models:
        torch.manual_seed(0)
        model = vspec.build(vspec.load_spec(ROOT / f"specs/{name}.py")).train()
        batch = PAIRS[name][1]
        x = torch.randn(batch, 3, 224, 224)
        for precision in run:
            times = {True: [], False: []}
            for r in range(args.rounds):
                for kept in (r % 2 == 0, r % 2 != 0):
                    times[kept].append(timed(model, x, precision, kept))
            ratios = sorted(d / k for d, k in zip(times[False], times[True]))
            default, kept = (1000 * statistics.median(times[k]) for k in (False, True))
            print(f"  {name:10s} {precision} batch {batch}: glibc's steady state {default:7.1f} ms, heap kept "
                  f"{kept:7.1f} ms per step; default/kept {statistics.median(ratios):.3f} "
                  f"(range {ratios[0]:.3f}-{ratios[-1]:.3f})")
    set_heap(False)


if __name__ == "__main__":
    main()
