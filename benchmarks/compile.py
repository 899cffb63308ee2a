"""torch.compile(fullgraph=True) with inductor on every preset, shrunk as the tests shrink them (benchmarks/shrunk.py):
per preset the graph breaks (dynamo's explain), the compile time, max |compiled - eager| of the eval logits, and
the eval forward time of compiled over eager (median of alternating rounds, same process; < 1: compiled faster).

    python -m benchmarks.compile [PRESET ...] [--rounds 5]
"""

import argparse
import statistics
import time

import torch

from .common import ROOT
from .shrunk import shrunk


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="*", help="preset names (default: every file in specs/)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    names = args.presets or [p.stem for p in sorted((ROOT / "specs").glob("*.py"))]
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads")
    for name in names:
        model, x, breaks = shrunk(name)
        with torch.no_grad():
            compiled = torch.compile(model, fullgraph=True)
            compile_s = timed(lambda: compiled(x))
            diff = (compiled(x) - model(x)).abs().max().item()
            ratios = [timed(lambda: compiled(x)) / timed(lambda: model(x)) for _ in range(args.rounds)]
        print(f"{name:26s} breaks {breaks}  compile {compile_s:6.1f} s  max |diff| {diff:.1e}  "
              f"forward compiled/eager {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})",
              flush=True)


if __name__ == "__main__":
    main()
