"""The measurements that decide the training loop's CUDA defaults (issue 55), each a row of OUT/loop_defaults.json
written as soon as it is measured (a run cut short keeps what it measured), each in a process of its own under its
own time limit:
  - bare: the bare training step (forward + backward + AdamW on one batch on the device; bf16 autocast and
    channels-last on CUDA) with AdamW's foreach or fused kernel, eager or under torch.compile (the compile's
    seconds written beside): images/s and MFU (fvcore's MACs x 2 x 3 / time / the device's dense bf16 peak,
    benchmarks/gpu.py's table);
  - loop: the whole `vspec train` loop (recipe none, its second epoch as it reports it) on synthetic data, and on
    generated ImageNet-shaped JPEGs decoded on the host or on the device (by the main process or the loader's
    workers), with and without the prefetcher (`--prefetch`), with either AdamW kernel, compiled or not; with
    the seconds from the loop's start to its first step (`first_batch_s`: the loader's workers' start, CUDA's and
    nvJPEG's set-up where they happen there) and its set-up before that (`setup_s`).
A loop's figure is read against the bare step of the same model, batch, kernel and graph in the same run.

    python -m benchmarks.loop_defaults [--groups bare,synthetic,device,host] [--model deit_small]
                                       [--bare-models vit_base,deit_small] [--batch-size 256] [--steps 20]
                                       [--limit 120] [--device cuda|cpu] [--out DIR] [--quick]
    python -m benchmarks.loop_defaults --table FILE.json

`--quick`: the loops' model alone, at depth 1 and 32 px, batch 4, 2 steps, one loader worker, torch.compile's eager
backend on a CPU: a check that every row runs (tests/test_gpu_bench.py), not a measurement.
"""

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, bare_step, mfu, out_dir, write_json

GROUPS = ("bare", "synthetic", "device", "host")


def rows(args) -> list[dict]:
    """The rows to measure, by group, in order: the bare steps first (every loop is read against them)."""
    base = {"batch": args.batch_size, "steps": args.steps}
    out = []
    for group in args.groups:
        if group == "bare":
            for model in args.bare_models:
                out += [dict(base, kind="bare", model=model, adamw=k, compile=c)
                        for k, c in (("foreach", False), ("fused", False), ("fused", True))]
        elif group == "synthetic":
            loop = dict(base, kind="loop", model=args.model, data="synthetic")
            out += [dict(loop, prefetch=p, adamw=k, compile=c)
                    for p, k, c in ((0, "foreach", False), (2, "foreach", False), (0, "fused", False),
                                    (2, "fused", False), (2, "fused", True))]
        elif group == "device":
            out += [dict(base, kind="loop", model=args.model, data="jpeg", decode_on="device", decode_in=d, prefetch=p,
                         adamw="fused", compile=False) for d, p in (("main", 0), ("main", 2), ("workers", 2))]
        else:
            out += [dict(base, kind="loop", model=args.model, data="jpeg", decode_on="host", prefetch=p,
                         adamw="fused", compile=False) for p in (0, 2)]
    return out


def spec_of(name: str, quick: bool):
    import vspec

    spec = vspec.load_spec(ROOT / f"specs/{name}.py")
    return vspec.override(spec, {"depth": 1, "img_size": [32, 32], "num_classes": 10}) if quick else spec


def measure_bare(row: dict, device: str, quick: bool) -> dict:
    """Images/s of the bare step (after three warm-up steps, whose seconds are the compile's under torch.compile)."""
    import torch
    from timm.optim import create_optimizer_v2

    import vspec

    spec = spec_of(row["model"], quick)
    cuda = device == "cuda"
    fused = {"fused": True} if row["adamw"] == "fused" else {}
    backend = "eager" if quick and not cuda else "inductor"
    step = bare_step(spec, row["batch"], device,
                     optimizer=lambda m: create_optimizer_v2(m, "adamw", lr=1e-3, weight_decay=0.05, **fused),
                     compile_model=(lambda m: torch.compile(m, backend=backend)) if row["compile"] else None)

    def timed(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    warm = timed(3)
    rates = [row["batch"] * row["steps"] / timed(row["steps"]) for _ in range(3)]
    return {"rate": statistics.median(rates), "rates": rates, "warmup_s": warm,
            "macs_per_sample": vspec.profile(spec, crosscheck=False).macs}


def measure_loop(row: dict, device: str, quick: bool, data_dir: str | None, workers: int | None) -> dict:
    """The loop's second epoch's images/s as it reports them, its set-up and its first step's seconds."""
    import torch

    import vspec
    from vspec.train import DataConfig, RunConfig, TrainConfig
    from vspec.train.engine import Training
    from vspec.train.recipes import resolve

    spec = spec_of(row["model"], quick)
    with tempfile.TemporaryDirectory() as tmp:
        name = "synthetic" if row["data"] == "synthetic" else "imagefolder"
        data = DataConfig(name, data_dir=data_dir if name != "synthetic" else None,
                          synthetic_size=row["batch"] * row["steps"])
        run = RunConfig(out=Path(tmp) / "run", device=device, workers=workers, log_interval=None,
                        prefetch=row["prefetch"], adamw=row["adamw"], compile=row["compile"],
                        decode_on=row.get("decode_on", "auto"), decode_in=row.get("decode_in", "auto"))
        recipe = resolve("none", epochs=2, batch_size=row["batch"])
        t0 = time.perf_counter()
        t = Training(TrainConfig(spec, recipe, data, run))
        t.setup()
        if row["compile"] and quick and device == "cpu":  # inductor's C++ build is minutes on a small CPU
            t.train_model = torch.compile(t.model, backend="eager")
        setup = time.perf_counter() - t0
        first, step = [], t.train_step

        def timed_step(*a):
            if not first:
                first.append(time.perf_counter())
            return step(*a)

        t.train_step = timed_step
        start = time.perf_counter()
        t.train()
        records = [json.loads(line) for line in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
        workers = t.loaders.train.num_workers
        del t.train_step, t  # the run and its loaders' workers go now (at exit they would be waited for)
        gc.collect()
    return {"rate": records[1]["images_per_s"], "first_epoch_rate": records[0]["images_per_s"],
            "epoch_s": [r["epoch_time_s"] for r in records], "setup_s": setup, "first_batch_s": first[0] - start,
            "workers": workers, "macs_per_sample": vspec.profile(spec, crosscheck=False).macs}


def child(args) -> int:
    """One row, measured in this process: its figures as one JSON line on stdout."""
    import torch

    row = json.loads(args.row)
    figures = measure_bare(row, args.device, args.quick) if row["kind"] == "bare" else \
        measure_loop(row, args.device, args.quick, args.data_dir, args.workers)
    if args.device == "cuda":
        from .gpu import peak_for

        peak = peak_for(torch.cuda.get_device_name())
        figures["mfu"] = mfu(figures["rate"], 6 * figures["macs_per_sample"], peak)
    print("ROW " + json.dumps(figures), flush=True)
    return 0


def label(row: dict) -> str:
    text = f"{row['kind']} {row['model']} b{row['batch']} {row['adamw']}" + (" compiled" if row["compile"] else "")
    if row["kind"] == "loop":
        if row["data"] == "jpeg":
            text += f" JPEGs decoded on the {row['decode_on']}" + (f" by {row['decode_in']}" if "decode_in" in row
                                                                    else "")
        else:
            text += " synthetic"
        text += f" prefetch {row['prefetch']}"
    return text


def table(result: dict) -> str:
    """Every row, and each loop against the bare step of its model, batch, kernel and graph."""
    bare = {(r["model"], r["batch"], r["adamw"], r["compile"]): r.get("rate") for r in result["rows"]
            if r["kind"] == "bare"}
    lines = [f"{result['device']}, torch {result['torch']}, {result['cpu_cores']} CPU cores"
             + ("" if result.get("complete") else " (cut short: the rows it measured)") + ":", "",
             "| row | img/s | of the bare step | MFU | first batch s | note |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        ref = bare.get((r["model"], r["batch"], r["adamw"], r["compile"]))
        rate = r.get("rate")
        note = r.get("error", "")
        if r.get("warmup_s") is not None and r["compile"]:
            note = f"compile + 3 steps {r['warmup_s']:.1f} s"
        lines.append(f"| {label(r)} | {'-' if rate is None else f'{rate:.0f}'} | "
                     + ("-" if rate is None or r["kind"] == "bare" or not ref else f"{rate / ref:.3f}") + " | "
                     + ("-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f} %") + " | "
                     + ("-" if r.get("first_batch_s") is None else f"{r['first_batch_s']:.1f}") + f" | {note} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", default=",".join(GROUPS), help=f"which rows: {', '.join(GROUPS)}")
    ap.add_argument("--model", default="deit_small", help="the loops' model")
    ap.add_argument("--bare-models", default="vit_base,deit_small")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20, help="steps per timed bare round; batches per loop epoch")
    ap.add_argument("--images", type=int, default=None, help="generated JPEGs (default: batch x steps)")
    ap.add_argument("--workers", type=int, default=None, help="the loops' loader workers (default: the loop's own)")
    ap.add_argument("--limit", type=int, default=120, help="seconds each row may take")
    ap.add_argument("--device", default=None, help="default: cuda where available")
    ap.add_argument("--out", type=Path, default=out_dir(), help="writes OUT/loop_defaults.json (default: $OUT, "
                                                               "else runs/benchmarks/)")
    ap.add_argument("--quick", action="store_true", help="every row small: a check that it runs")
    ap.add_argument("--table", type=Path, metavar="FILE.json", help="print the table of a result and stop")
    ap.add_argument("--row", help=argparse.SUPPRESS)  # a child: the row to measure
    ap.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return 0
    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.row:
        return child(args)
    args.groups = args.groups.split(",")
    args.bare_models = [args.model] if args.quick else args.bare_models.split(",")
    if set(args.groups) - set(GROUPS):
        ap.error(f"--groups: one or more of {', '.join(GROUPS)}")
    if args.quick:  # one loader worker: the prefetcher's thread runs
        args.batch_size, args.steps = 4, 2
        args.workers = 1 if args.workers is None else args.workers
    result = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "torch": torch.__version__,
              "cpu_cores": len(os.sched_getaffinity(0)), "quick": args.quick, "complete": False, "rows": []}
    out = args.out / "loop_defaults.json"
    todo = rows(args)
    with tempfile.TemporaryDirectory() as tmp:
        folder = None
        if any(r.get("data") == "jpeg" for r in todo):
            from .loader import make_folder  # ImageNet-shaped JPEGs

            folder = make_folder(Path(tmp) / "jpegs", args.images or args.batch_size * args.steps,
                                 classes=10 if args.quick else 1000)
        for row in todo:
            cmd = [sys.executable, "-m", "benchmarks.loop_defaults", "--row", json.dumps(row), "--device",
                   args.device]
            cmd += (["--quick"] if args.quick else []) + (["--data-dir", str(folder)] if folder else [])
            cmd += [] if args.workers is None else ["--workers", str(args.workers)]
            t0 = time.perf_counter()
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.limit,
                                      env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                          filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))))
                found = [line[4:] for line in done.stdout.splitlines() if line.startswith("ROW ")]
                row = dict(row, **json.loads(found[-1])) if found else dict(
                    row, error=(done.stderr.strip().splitlines() or ["no output"])[-1][:300])
            except subprocess.TimeoutExpired:
                row = dict(row, error=f"cut at its limit, {args.limit} s")
            row["wall_s"] = time.perf_counter() - t0
            result["rows"].append(row)
            write_json(out, result)
            print(f"{label(row)}: " + (f"{row['rate']:.1f} img/s" if "rate" in row else row["error"])
                  + ("" if row.get("mfu") is None else f", MFU {100 * row['mfu']:.1f} %")
                  + ("" if row.get("first_batch_s") is None else f", first batch {row['first_batch_s']:.1f} s")
                  + f" ({row['wall_s']:.0f} s)", flush=True)
    result["complete"] = True
    write_json(out, result)
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
