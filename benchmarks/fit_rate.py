"""How fast `vspec fit` searches: valid candidates profiled per second for a ViT-S-sized spec (specs/deit_small.py)
on one CPU thread, after one warm-up profile (torch's first meta build and FlopCounterMode pay their start-up once
per process; that time is printed too).

Two grids: the default `--vary dim,depth` against sot_small's MACs (width 192-768 in steps of 8, depth 1-24: a new
width costs one count per distinct part, a new depth none), and a grid where every candidate is new to the cache
(width x MLP ratio at depth 12: each valid candidate counts its block afresh), the worst case.

    python -m benchmarks.fit_rate
"""

import time

import torch

import vspec
from vspec import fitting

from .common import ROOT


def main() -> dict:
    torch.set_num_threads(1)
    deit = vspec.load_spec(ROOT / "specs/deit_small.py")
    t0 = time.perf_counter()
    target = vspec.profile(vspec.load_spec(ROOT / "specs/sot_small.py"), meta=True, crosscheck=False).macs
    start = time.perf_counter() - t0
    out = {"start_s": start}
    for name, vary in (("dim x depth (default)", ["dim", "depth"]),
                       ("dim x mlp ratio, every candidate new", ["dim", "block.ffn.ratio=2.0:6.0:0.25"])):
        result = fitting.fit(deit, macs=target, vary=vary, tolerance=1.0)
        out[name] = {"valid": len(result.candidates), "tried": result.tried, "seconds": result.seconds,
                     "rate": result.rate}
        print(f"{name:38s} {len(result.candidates):5d} valid of {result.tried:5d} tried in {result.seconds:6.2f} s: "
              f"{result.rate:6.0f} candidates / s")
    print(f"(first profile of the process, torch's start-up included: {start:.2f} s; one CPU thread, torch "
          f"{torch.__version__})")
    return out


if __name__ == "__main__":
    main()
