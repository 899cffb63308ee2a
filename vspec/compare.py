"""`vspec compare SPEC... --data DATA --seeds N`: train several specs on the same data, split, recipe and seeds
(the training engine of tools/train.py, on the CPU), then tabulate what each costs and how well it learned.

Per spec: parameters and MACs (`vspec.profile`, one image at the spec's size), inference throughput (`throughput`:
eval-mode forward of a random batch, no gradients, timed after a warm-up) and the validation top-1 of every seed
(the last epoch's, not the best: nothing is selected on the validation split), summarised as its mean, sample
standard deviation and min-max. Writes OUT/compare.json (every number, each run's record, the command, the data,
the recipe, the torch version, the CPU), OUT/compare.png (top-1 against MACs, one point per spec, its min-max as
the error bar) and prints `table` (markdown). Each run's own folder (checkpoints, metrics, curves) is
OUT/runs/NAME-seedS.

Every spec sees the same fixed split of `data` (the dataset's own; independent of the seed), and seed s gives
every spec the same data order; s also seeds the weights. `train_seeds` and `spread` are shared with
tools/text_demo.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import attrs

from .spec import Model, load_spec

FILES = ("compare.json", "compare.png")
THROUGHPUT = {"batch": 64, "warmup": 3, "iterations": 10}


def spread(values: Sequence[float]) -> dict[str, float]:
    """mean, sample standard deviation (0 for one value), min and max."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "std": std, "min": min(values), "max": max(values)}


def train_seeds(names: Sequence[str], seeds: Sequence[int], train: Callable[[str, int], float],
                say: Callable[[str], None] = print) -> dict[str, list[float]]:
    """`train(name, seed)` for every name and seed (names outermost), saying which run starts and what it scored;
    returns each name's scores in seed order."""
    scores: dict[str, list[float]] = {}
    total, done = len(names) * len(seeds), 0
    for name in names:
        for seed in seeds:
            done += 1
            say(f"[{done}/{total}] {name} seed {seed}: training")
            t0 = time.perf_counter()
            scores.setdefault(name, []).append(train(name, seed))
            say(f"[{done}/{total}] {name} seed {seed}: {scores[name][-1]:.2f} % in {time.perf_counter() - t0:.0f} s")
    return scores


def load_specs(paths: Sequence[str | Path]) -> dict[str, tuple[Path, Model]]:
    """name (the file's stem) -> (path, spec); two files with one name, or a text body, are refused."""
    specs: dict[str, tuple[Path, Model]] = {}
    for path in map(Path, paths):
        name = path.stem
        if name in specs:
            raise ValueError(f"two specs are named {name!r} ({specs[name][0]} and {path}): the table and the runs' "
                             "folders are keyed by the file's name; give each spec once, under its own name")
        spec = load_spec(path)
        if spec.embedder.text:
            raise ValueError(f"{path}: a text body ({spec.embedder.kind} embedder); compare trains image models")
        specs[name] = (path, spec)
    return specs


def throughput(spec: Model, batch: int = THROUGHPUT["batch"], warmup: int = THROUGHPUT["warmup"],
               iterations: int = THROUGHPUT["iterations"]) -> float:
    """Images per second of an eval-mode forward pass on the CPU: `batch` random images under no_grad, `warmup`
    passes untimed, then `batch` / the median time of `iterations` passes (the median: other processes on the
    machine slow some passes)."""
    import torch

    from .compiler import build

    torch.manual_seed(0)
    model = build(spec).eval()
    x = model.example_input(batch)
    times = []
    with torch.no_grad():
        for i in range(warmup + iterations):
            t0 = time.perf_counter()
            model(x)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    return batch / statistics.median(times)


def command_line(args) -> str:
    """The `vspec compare` command that `args` (its parsed flags) stand for, every setting spelled out."""
    argv = ["vspec", "compare", *args.specs, "--data", args.data]
    argv += ["--data-dir", args.data_dir] if args.data_dir else []
    argv += ["--seeds", str(args.seeds), "--seed-base", str(args.seed_base), "--recipe", args.recipe]
    for flag in ("epochs", "batch_size", "lr", "warmup_epochs", "threads"):
        if getattr(args, flag) is not None:
            argv += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    return shlex.join([*argv, "--out-dir", str(args.out_dir)])


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def compare(paths: Sequence[str | Path], *, data: str, seeds: Sequence[int], recipe, out: Path,
            recipe_name: str = "compare", data_dir: str | None = None, command: str = "",
            say: Callable[[str], None] = print) -> dict[str, Any]:
    """Train every spec in `paths` with every seed in `seeds` (`recipe`, on the CPU), then write OUT/compare.json
    and OUT/compare.png; returns the JSON's content. Raises ValueError (with DataError) / SpecError for what cannot
    be done, before any training."""
    import torch

    from .compiler import check_fit
    from .profiler import profile
    from .train.data import DATASETS, DataError, build_datasets, build_transforms
    from .train.engine import TrainConfig, run

    t0 = time.perf_counter()
    DATA = tuple(d for d in DATASETS if d != "synthetic")  # synthetic: random labels, nothing to compare
    if data not in DATA:
        raise DataError(f"--data: unknown {data!r}; expected one of {', '.join(DATA)}")
    specs = load_specs(paths)
    first = next(iter(specs.values()))[1]
    tf = build_transforms(first.img_size, first.in_chans, train=False)  # the split's sizes and classes, read once
    train_ds, val_ds, classes = build_datasets(data, img_size=first.img_size, in_chans=first.in_chans,
                                               train_transform=tf, eval_transform=tf, data_dir=data_dir)
    if recipe.batch_size > len(train_ds):  # the engine drops the last partial batch: none would be left
        raise DataError(f"--batch-size {recipe.batch_size} is more than the {len(train_ds)} training images of {data}")
    changed = [name for name, (_, spec) in specs.items() if spec.num_classes != classes]
    for name, (path, spec) in specs.items():  # every spec's size, at the dataset's classes, before any run
        specs[name] = (path, attrs.evolve(spec, num_classes=classes))
        check_fit(specs[name][1], max(recipe.batch_size, THROUGHPUT["batch"]), f"{path}: training it")
    try:  # the folders every run writes into
        (out / "runs").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--out-dir {out}: cannot make {out / 'runs'} ({e.strerror or e})") from None
    for name in changed:
        say(f"note: {name}: {data} has {classes} classes; num_classes set to {classes}")

    def train(name: str, seed: int) -> float:
        with contextlib.redirect_stdout(sys.stderr):  # the engine's closing line too: stdout is the table's
            final = run(TrainConfig(spec=specs[name][1], recipe=recipe, data=data, data_dir=data_dir,
                                    out=out / "runs" / f"{name}-seed{seed}", seed=seed, device="cpu",
                                    log_every=10**9, overwrite=True))  # log_every: one progress line per epoch
        runs.setdefault(name, []).append({"seed": seed, **final})
        return final["val_top1"]

    runs: dict[str, list[dict[str, Any]]] = {}
    scores = train_seeds(list(specs), seeds, train, say)
    rows = []
    for name, (path, spec) in specs.items():
        prof = profile(spec, crosscheck=False)
        rows.append({"name": name, "path": str(path), "params": prof.params, "macs": prof.macs,
                     "images_per_s": throughput(spec), "top1": spread(scores[name]), "runs": runs[name]})
    result = {
        "command": command, "data": {"name": data, "train": len(train_ds), "val": len(val_ds), "classes": classes},
        "recipe": {"name": recipe_name, **asdict(recipe)}, "seeds": list(seeds), "metric": "val top-1 (%) of the "
        "last epoch", "throughput": {**THROUGHPUT, "how": "eval-mode forward of random images under no_grad on the "
                                     "CPU; batch / median time of the timed passes"},
        "torch": torch.__version__, "python": platform.python_version(), "cpu": cpu_name(),
        "threads": torch.get_num_threads(), "load_average": [round(x, 2) for x in os.getloadavg()],
        "wall_s": time.perf_counter() - t0, "specs": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    plot(result, out / "compare.png")
    return result


def table(result: dict[str, Any]) -> str:
    """The comparison as a markdown table (from compare.json's content)."""
    lines = ["| spec | params | MACs | images/s | val top-1 (%), mean | std | min-max |", "|---" * 7 + "|"]
    for r in result["specs"]:
        t = r["top1"]
        lines.append(f"| {r['name']} | {r['params']:,} | {r['macs'] / 1e6:.2f} M | {r['images_per_s']:,.0f} | "
                     f"{t['mean']:.2f} | {t['std']:.2f} | {t['min']:.2f}-{t['max']:.2f} |")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Mean val top-1 against MACs, one labelled point per spec, its min-max as the error bar."""
    from .analysis import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for r in result["specs"]:
        t, x = r["top1"], r["macs"] / 1e6
        ax.errorbar([x], [t["mean"]], yerr=[[t["mean"] - t["min"]], [t["max"] - t["mean"]]], fmt="o", capsize=4)
        ax.annotate(r["name"], (x, t["mean"]), textcoords="offset points", xytext=(6, 6), fontsize=9)
    d = result["data"]
    ax.set(xlabel="MACs per image (M)", ylabel="val top-1 (%)",
           title=f"{d['name']} ({d['train']:,} / {d['val']:,}), {result['recipe']['epochs']} epochs, "
                 f"seeds {', '.join(map(str, result['seeds']))}")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def say_err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
