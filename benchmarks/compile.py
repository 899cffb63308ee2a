"""torch.compile on the CPU, two ways.

Presets shrunk (default): torch.compile(fullgraph=True) with inductor on every preset, shrunk as the tests shrink them
(benchmarks/shrunk.py): per preset the graph breaks (dynamo's explain), the compile time, max |compiled - eager| of
the eval logits, and the eval forward time of compiled over eager (median of alternating rounds, same process; < 1:
compiled faster).

Training steps (--step): the full-size training step (forward + backward, train mode, benchmarks/models.py's batch) of
presets with a twin (benchmarks/models.py's PAIRS), vspec's eager step against its own compiled step and against the
twin's, eager and compiled, all four in the same rounds (back to back, order alternating) in each precision (bf16 =
under CPU bf16 autocast). Under torch.compile vspec's fast paths step aside (vspec/ops/fast.py): its compiled step is
the backend's (inductor by default) from the plain ops. Each compiled model's first step, its compile, is timed and
printed (inductor's on-disk cache empty: a cold compile); the rows are benchmarks/models.py's (`vspec` = vspec's eager
step, "vspec / reference" > 1: eager vspec is faster), so `--table` prints docs/speed.md's table.

    python -m benchmarks.compile [PRESET ...] [--rounds 5]
    python -m benchmarks.compile --step swin_tiny [--precision bf16] [--batch-size N] [--backend inductor]
                                 [--rounds 5] [--threads N] [--json FILE]
    python -m benchmarks.compile --table FILE.json
"""

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import timm
import torch

import vspec

from . import models
from .common import DTYPES, ROOT, autocast, forward_backward, header, precisions, race, race_options, table_or_threads
from .shrunk import shrunk

CACHE = "TORCHINDUCTOR_CACHE_DIR"  # where inductor keeps compiled graphs and kernels between processes


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


@contextmanager
def cold_cache() -> Iterator[None]:
    """inductor's on-disk cache in a new temporary folder for the block (so that a compile time is a cold compile's),
    then the folder it was."""
    before = os.environ.get(CACHE)
    with tempfile.TemporaryDirectory(prefix="vspec-compile-") as folder:
        os.environ[CACHE] = folder
        try:
            yield
        finally:
            if before is None:
                del os.environ[CACHE]
            else:
                os.environ[CACHE] = before


def shrunk_forwards(names: list[str], rounds: int) -> None:
    """The default mode: each shrunk preset's eval forward, compiled against eager."""
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads")
    for name in names or [p.stem for p in sorted((ROOT / "specs").glob("*.py"))]:
        model, x, breaks = shrunk(name)
        with torch.no_grad():
            compiled = torch.compile(model, fullgraph=True)
            compile_s = timed(lambda: compiled(x))
            diff = (compiled(x) - model(x)).abs().max().item()
            ratios = [timed(lambda: compiled(x)) / timed(lambda: model(x)) for _ in range(rounds)]
        print(f"{name:26s} breaks {breaks}  compile {compile_s:6.1f} s  max |diff| {diff:.1e}  "
              f"forward compiled/eager {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})",
              flush=True)


def training_steps(name: str, batch_size: int, rounds: int, run: list[str], backend: str,
                   rates: dict | None = None) -> list[dict]:
    """The --step rows of preset `name`: vspec's eager training step against its twin's (eager, compiled) and its own
    compiled step, in each precision of `run`; each compiled row's compile time as `compile_s`."""
    ref_name, default_batch = models.PAIRS[name]
    batch = batch_size or default_batch
    torch.manual_seed(0)
    spec = vspec.load_spec(ROOT / f"specs/{name}.py")
    ref, ours = models.pair(name, spec)
    macs = vspec.profile(spec, crosscheck=False).macs
    x = torch.randn(batch, 3, 224, 224)
    print(f"{name} vs {ref_name}: training step, batch {batch}, 224 px, {rounds} rounds, {' and '.join(run)}, "
          f"compiled with {backend}")
    rows = []
    for precision in run:
        torch._dynamo.reset()  # each precision's graphs compiled afresh, their compile timed from a cold cache
        steps = {"vspec": ours.train(), ref_name: ref.train(),
                 f"{ref_name} compiled": torch.compile(ref, backend=backend),
                 "vspec compiled": torch.compile(ours, backend=backend)}

        def step(model, x, precision=precision):
            with autocast(precision):
                forward_backward(model, x)

        with cold_cache():
            compile_s = {who: timed(lambda m=m: step(m, x)) for who, m in steps.items() if who.endswith(" compiled")}
        times = race(steps, step, x, rounds)
        for who in list(steps)[1:]:
            ratios = sorted(a / b for a, b in zip(times[who], times["vspec"]))  # per round: eager vspec / it
            r = models.row(name, who, f"batch {batch}, 224 px", "forward+backward", "img/s",
                           batch / statistics.median(times[who]), batch / statistics.median(times["vspec"]), ratios,
                           precision=precision, flops=6 * macs, rates=rates)
            r["compile_s"] = compile_s.get(who)
            built = f" (compile {r['compile_s']:.1f} s)" if r["compile_s"] is not None else ""
            print(f"  {precision} {who}{built}: {r['reference_rate']:.2f} img/s, vspec eager {r['vspec_rate']:.2f} "
                  f"img/s, vspec eager / it {r['ratio']:.3f} (range {ratios[0]:.3f}-{ratios[-1]:.3f})", flush=True)
            rows.append(r)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("presets", nargs="*", help="preset names (default: every file in specs/; with --step: swin_tiny)")
    ap.add_argument("--step", action="store_true", help="the full-size training step against its twin's, eager and "
                                                        "compiled (presets with a twin: benchmarks/models.py)")
    ap.add_argument("--precision", nargs="+", choices=list(DTYPES), default=None,
                    help="--step's precisions (default: fp32 and bf16 where the CPU computes bf16 natively, else fp32)")
    ap.add_argument("--batch-size", type=int, default=0, help="--step's batch (default: benchmarks/models.py's)")
    ap.add_argument("--backend", default="inductor", help="torch.compile's backend for --step (default: inductor)")
    race_options(ap, rounds=5)
    args = ap.parse_args()
    if table_or_threads(args, models.table):
        return
    if not args.step:
        if args.json:
            raise SystemExit("--json writes the rows of --step; the shrunk presets' forwards are printed only")
        shrunk_forwards(args.presets, args.rounds)
        return
    names = args.presets or ["swin_tiny"]
    unknown = sorted(set(names) - set(models.PAIRS))
    if unknown:
        raise SystemExit(f"--step runs the presets with a twin ({', '.join(sorted(models.PAIRS))}), "
                         f"not {', '.join(unknown)}")
    run = precisions(args.precision)
    info = header({"timm": timm.__version__, "compile backend": args.backend}, run)
    rows = [r for n in names for r in training_steps(n, args.batch_size, args.rounds, run, args.backend,
                                                     info["matmul GFLOP/s"])]
    models.write(args.json, {"machine": info, "rows": rows})


if __name__ == "__main__":
    main()
