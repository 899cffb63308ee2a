"""`vspec compare SPEC... --data DATA --seeds N`: train several specs on the same data, split, recipe and seeds
(the training engine of tools/train.py, on the CPU or `device`), then tabulate what each costs and how well it
learned.

Per spec: parameters and MACs (`vspec.profile`, one sample at the spec's size), inference throughput
(`throughput`: eval-mode forward of a random batch, no gradients, timed after a warm-up) and the validation metric
of every seed (top-1 for images, the task's headline metric for text: rt-polarity's accuracy, a GLUE task's, a
correlation of constant predictions counted as 0; the last epoch's, not the best: nothing is selected on the
validation split), summarised as its mean, sample standard deviation and min-max, and for each spec against the
best one Welch's t-test of the difference of the means over the seeds (`welch`: is it distinguishable from the
seed noise? The best is picked by its mean, and each other spec tested against it without a correction for the
number of comparisons: a screen, not a proof). Writes OUT/compare.json (every number, each run's
record, the command, the data, the recipe, the torch version, the CPU), OUT/compare.png (the metric against MACs,
one point per spec, its min-max as the error bar, hollow where it is within the noise of the best) and prints
`table` (markdown). Each run's own folder (checkpoints, metrics, curves) is OUT/runs/NAME-seedS.

Before training, `grid` expands each spec into the cartesian product of overrides (NAME[k=v,...]), and `match`
fits every spec but the reference (the first, or `to`) to the reference's MACs or parameters (`vspec.fit`, over
`vary`), so that the comparison is at one budget; the table shows the original counts beside the matched ones. The
runs train in `precisions` (auto: `vspec train`'s); several make a row of each spec per precision, NAME@P.

Every spec sees the same fixed split of `data` (the dataset's own; independent of the seed; for text one
tokenizer, trained once into OUT/tokenizer), and seed s gives every spec the same data order; s also seeds the
weights. `train_seeds` and `spread` are shared with tools/text_demo.py. The report (`spread`, `welch`, `noise`,
`table`, `plot`) is vspec/compare_report.py's, re-exported here.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from .compare_report import ALPHA, METRICS, noise, plot, spread, table, welch
from .fitting import MAX_CANDIDATES, FitError, check_search, deviation, fit
from .spec import Model, load_spec, override
from .spec.errors import printable
from .train.config import PRECISIONS, DataConfig, RunConfig, TrainConfig
from .train.data import registry
from .train.data.registry import names
from .train.text import run_tokenizer

__all__ = [
    "ALPHA", "FILES", "MAX_GRID", "command_line", "compare", "cpu_name", "data_info", "load_specs", "noise", "plot",
    "say_err", "spread", "table", "throughput", "train_seeds", "welch",
]
FILES = ("compare.json", "compare.png")
MAX_GRID = 100  # grid points (specs x --grid's combinations) by default: each is trained once per seed
_THROUGHPUT = {"batch": 64, "warmup": 3, "iterations": 10}
_TOKEN_LABELED = "+tl"  # --token-labels: the row of a spec trained on them


def train_seeds(names: Sequence[str], seeds: Sequence[int], train: Callable[[str, int], float],
                say: Callable[[str], None] = print) -> dict[str, list[float]]:
    """`train(name, seed)` for every name and seed (names outermost), saying which run starts and what it scored;
    returns each name's scores in seed order.

    Args:
        names: the specs' names, trained in this order.
        seeds: the seeds each is trained with.
        train: `train(name, seed)` trains one run and returns its score.
        say: where the progress lines go.
    """
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


def _grid_points(paths: Sequence[str | Path], grid: dict[str, list] | None, max_points: int = MAX_GRID) -> int:
    """How many specs `grid` makes of `paths` (counted, nothing loaded); ValueError past `max_points` or for a
    value that is not a finite number."""
    for key, values in (grid or {}).items():
        bad = next((v for v in values if isinstance(v, float) and not math.isfinite(v)), None)
        if bad is not None:
            raise ValueError(printable(f"--grid {key}: {bad!r} is not a finite number"))
    points = len(paths) * math.prod(len(v) for v in (grid or {}).values())
    if points > max_points:
        shape = " x ".join([f"{len(paths)} specs", *(f"{len(v)} {k}" for k, v in (grid or {}).items())])
        raise ValueError(printable(f"--grid: {points:,} grid points ({shape}), more than {max_points:,}; each is "
                                   "trained --seeds times: narrow --grid or raise --max-candidates"))
    return points


def load_specs(paths: Sequence[str | Path], grid: dict[str, list] | None = None,
               text: bool = False, max_points: int = MAX_GRID) -> dict[str, tuple[Path, Model]]:
    """name (the file's stem; with `grid`, stem[k=v,...] per combination) -> (path, spec); a grid of more than
    `max_points` specs (`_grid_points`: counted before any spec is loaded), two files with one name, or a body of
    the other modality than the data's (`text`), are refused.

    Args:
        paths: the spec files or presets.
        grid: field -> values, each spec expanded into every combination (None: none).
        text: the data is text (a text body is required; False: an image model).
        max_points: the most specs the grid may make.
    """
    _grid_points(paths, grid, max_points)
    specs: dict[str, tuple[Path, Model]] = {}
    for path in map(Path, paths):
        spec = load_spec(path)
        if spec.embedder.text != text:
            raise ValueError(f"{path}: a text body ({spec.embedder.kind} embedder) on image data; give --data "
                             f"rt-polarity or glue" if spec.embedder.text else
                             f"{path}: an image model on text data; give a text body (a TokenEmbed embedder)")
        combos = itertools.product(*grid.values()) if grid else [()]
        for combo in combos:
            name = path.stem + (f"[{','.join(f'{k}={v}' for k, v in zip(grid, combo))}]" if grid else "")
            if name in specs:
                raise ValueError(f"two specs are named {name!r} ({specs[name][0]} and {path}): the table and the "
                                 "runs' folders are keyed by the file's name; give each spec once, under its own name")
            specs[name] = (path, override(spec, dict(zip(grid, combo))) if grid else spec)
    return specs


def _check_searches(specs: dict[str, tuple[Path, Model]], what: str, to: object, vary: Sequence[str] | None,
                   max_candidates: int) -> None:
    """ValueError, before anything is profiled, for a --match search past `max_candidates` (`fitting.check_search`)
    of a spec that `_match_budget` fits (every one but the first, or every one with `to`)."""
    for i, (name, (_, spec)) in enumerate(specs.items()):
        if to is not None or i:
            try:
                check_search(spec, vary, max_candidates)
            except FitError as e:
                raise ValueError(printable(f"--match {what}: {name}: {e}")) from None


def _match_budget(specs: dict[str, tuple[Path, Model]], what: str, to: Model | None, vary: Sequence[str] | None,
                 tolerance: float, say: Callable[[str], None],
                 max_candidates: int | None = None) -> dict[str, dict[str, Any]]:
    """Fits every spec but the reference (`to`, else the first) to the reference's `what` (macs | params) in place
    (each search at most `max_candidates`, default fitting.MAX_CANDIDATES: `fit` refuses a larger one before
    profiling it; `compare` checks them all first, `_check_searches`); returns, per spec, its original counts, the
    fitted field values (none for the reference) and its deviation."""
    from .profiler import profile  # torch

    max_candidates = max_candidates or MAX_CANDIDATES
    first = next(iter(specs))
    reference = to if to is not None else specs[first][1]
    ref = profile(reference, meta=True, crosscheck=False)
    budget = {"macs": ref.macs, "params": ref.params}[what]
    matched: dict[str, dict[str, Any]] = {}
    for name, (path, spec) in specs.items():
        p = profile(spec, meta=True, crosscheck=False)
        entry = {"params": p.params, "macs": p.macs, "fitted": {},
                 "deviation": deviation(p.params, p.macs, {what: budget})}
        if to is not None or name != first:
            try:
                result = fit(spec, **{what: budget}, vary=vary, tolerance=tolerance, max_candidates=max_candidates)
            except FitError as e:
                raise ValueError(f"--match {what}: {name}: {e}") from None
            specs[name] = (path, result.spec)
            entry.update(fitted=result.best.values, deviation=result.best.deviation)
            say(f"{name}: {', '.join(f'{k}={v}' for k, v in result.best.values.items())} matches {what} "
                f"{budget:,.0f} ({100 * result.best.deviation:+.2f} %)")
        matched[name] = entry
    return matched


def throughput(spec: Model, batch: int = _THROUGHPUT["batch"], warmup: int = _THROUGHPUT["warmup"],
               iterations: int = _THROUGHPUT["iterations"], device: str = "cpu", precision: str = "fp32") -> float:
    """Samples per second of an eval-mode forward pass on `device`: `batch` random images (or token ids) under
    no_grad (and bf16 / fp16 autocast for `precision` bf16 / fp16), `warmup` passes untimed, then `batch` / the
    median time of `iterations` passes (the median: other processes on the machine slow some passes; synchronised
    on CUDA).

    Args:
        spec: the model spec.
        batch: the samples of each pass.
        warmup: the untimed passes first.
        iterations: the timed passes.
        device: where it runs ("cpu", "cuda").
        precision: fp32, bf16 or fp16.
    """
    import torch  # torch

    from .compiler import build  # torch

    torch.manual_seed(0)
    model = build(spec).eval().to(device)
    x = model.example_input(batch).to(device)
    times, half = [], {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    with torch.no_grad(), torch.autocast(torch.device(device).type, dtype=half, enabled=half is not None):
        for i in range(warmup + iterations):
            t0 = time.perf_counter()
            model(x)
            if device != "cpu":
                torch.cuda.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    return batch / statistics.median(times)


def command_line(args) -> str:
    """The `vspec compare` command that `args` (its parsed flags) stand for, every setting spelled out.

    Args:
        args: the parsed flags of `vspec compare` (vspec/cli/compare.py).
    """
    argv = ["vspec", "compare", *args.specs, "--data", args.data]
    argv += ["--data-dir", args.data_dir] if args.data_dir else []
    argv += ["--task", args.task] if args.task else []
    argv += ["--token-labels", args.token_labels] if getattr(args, "token_labels", None) else []
    argv += ["--seeds", str(args.seeds), "--seed-base", str(args.seed_base), "--recipe", args.recipe]
    for flag in ("epochs", "batch_size", "lr", "warmup_epochs", "threads"):
        if getattr(args, flag) is not None:
            argv += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    for item in args.grid:
        argv += ["--grid", item]
    if args.match:
        argv += ["--match", args.match, *(["--to", args.to] if args.to else [])]
        argv += [a for v in args.vary for a in ("--vary", v)] + ["--tolerance", str(args.tolerance)]
    argv += ["--device", args.device] if args.device != "cpu" else []
    argv += ["--max-candidates", str(args.max_candidates)] if getattr(args, "max_candidates", None) else []
    argv += ["--precision", args.precision] if getattr(args, "precision", "auto") != "auto" else []
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


def data_info(data: str, first: Model, *, data_dir: str | None, task: str | None, specs, out: Path) -> dict:
    """The split's sizes and classes, read once; for text the tokenizer every run shares, trained once into
    OUT/tokenizer (its vocabulary fits the smallest embedder), the task and its headline metric.

    Args:
        data: the data set's name.
        first: the first spec (its image size and channels read the images).
        data_dir: where the data set is (None: its default place).
        task: the text task (None: its default).
        specs: name -> (path, spec) of every spec compared (a tokenizer's vocabulary fits them all).
        out: the comparison's folder (the tokenizer's is OUT/tokenizer).
    """
    from .train.data.registry import DataError  # torch
    from .train.data.sources import build_datasets  # torch
    from .train.data.transforms import build_transforms  # torch
    from .train.text.batches import text_datasets  # torch
    from .train.text.metrics import headline  # torch
    from .train.text.readers import task_name  # torch

    if data in names("text"):
        shutil.rmtree(run_tokenizer(out), ignore_errors=True)  # this comparison's own, never an earlier one's
        bodies = [spec for _, spec in specs.values()]
        text = text_datasets(data, task=task, data_dir=data_dir, tokenizer=None, out=out,
                             max_len=min(b.embedder.seq_len for b in bodies),
                             vocab_size=min(b.embedder.vocab_size for b in bodies))
        return {"name": data, "task": task_name(text.task), "train": len(text.train), "val": len(text.val),
                "classes": text.num_classes, "tokenizer": str(text.tokenizer), "metric": f"val_{headline(text.task)}"}
    if task is not None:
        raise DataError("--task names a GLUE task: for --data glue")
    tf = build_transforms(first.img_size, first.in_chans, train=False)
    train_ds, val_ds, classes = build_datasets(data, img_size=first.img_size, in_chans=first.in_chans,
                                               train_transform=tf, eval_transform=tf, data_dir=data_dir)
    return {"name": data, "train": len(train_ds), "val": len(val_ds), "classes": classes, "metric": "val_top1"}


def _requested(paths: Sequence[str | Path], data: str, grid: dict[str, list] | None, match: str | None,
               to: str | Path | None, vary: Sequence[str] | None, device: str, max_candidates: int | None,
               precisions: Sequence[str]) -> tuple[bool, dict[str, tuple[Path, Model]]]:
    """`compare`'s refusals before the data is read: the precisions, the data set, --max-candidates, the specs and
    the grid, --match, the searches' sizes, the device (in this order); whether the data is text, and the specs."""
    import torch  # torch

    from .train.data.registry import DataError  # torch

    if not precisions or len(set(precisions)) < len(precisions) or not set(precisions) <= set(PRECISIONS):
        raise ValueError(f"--precision: {','.join(map(str, precisions))!r}: expected one or more of "
                         f"{', '.join(PRECISIONS)}, each once")
    comparable = tuple(d.name for d in registry.table().values() if d.comparable)  # not synthetic's random labels
    if data not in comparable:
        raise DataError(f"--data: unknown {data!r}; expected one of {', '.join(comparable)}")
    text = data in names("text")
    if max_candidates is not None and (not isinstance(max_candidates, int) or isinstance(max_candidates, bool)
                                       or max_candidates < 1):
        raise ValueError(f"--max-candidates: must be an int >= 1, got {max_candidates!r}")
    specs = load_specs(paths, grid, text, max_candidates or MAX_GRID)
    if match not in (None, "macs", "params"):
        raise ValueError(f"--match: expected macs or params, got {match!r}")
    if match and grid:  # a grid point re-fitted over its own field would undo the grid
        searched = {str(v).partition("=")[0] for v in (vary or ["dim", "depth"])}
        if searched & set(grid):
            raise ValueError(f"--grid {', '.join(sorted(searched & set(grid)))} is also what --match varies "
                             f"({', '.join(sorted(searched))}): vary other fields (--vary) or grid others")
    if match:  # the searches' sizes, before the data is read or anything profiled
        _check_searches(specs, match, to, vary, max_candidates or MAX_CANDIDATES)
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device here")
    return text, specs


def _at_classes(specs: dict[str, tuple[Path, Model]], info: dict, recipe, data: str, to: str | Path | None,
                text: bool) -> tuple[list[str], Model | None]:
    """Every spec (in place) and the reference `to` at the data set's classes; the names of the specs changed, and
    the reference. Refuses a batch larger than the training split and a reference of the other modality."""
    from .train.data.registry import DataError  # torch

    classes = info["classes"]
    if recipe.batch_size > info["train"]:  # the engine drops the last partial batch: none would be left
        raise DataError(f"--batch-size {recipe.batch_size} is more than the {info['train']} training "
                        f"{'samples' if text else 'images'} of {data}")
    changed = [name for name, (_, spec) in specs.items() if spec.num_classes != classes]
    for name, (path, spec) in specs.items():  # at the dataset's classes: the counts the budget compares too
        specs[name] = (path, attrs.evolve(spec, num_classes=classes))
    reference = attrs.evolve(load_spec(to), num_classes=classes) if to is not None else None
    if reference is not None and reference.embedder.text != text:
        raise ValueError(f"--to {to}: a {'text body' if reference.embedder.text else 'image model'}; the compared "
                         f"specs are {'text bodies' if text else 'image models'}")
    return changed, reference


def _check_room(specs: dict[str, tuple[Path, Model]], batch: int, out: Path) -> None:
    """Every spec's size at the batch it trains and is timed with (`check_fit`), then the runs' folder, made."""
    from .compiler import check_fit  # torch

    for name, (path, spec) in specs.items():  # every spec's size, before any run
        check_fit(spec, max(batch, _THROUGHPUT["batch"]), f"{path}: training it")
    try:  # the folders every run writes into
        (out / "runs").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--out-dir {out}: cannot make {out / 'runs'} ({e.strerror or e})") from None


def _variants(specs: dict[str, tuple[Path, Model]], token_labels: str | None, precisions: Sequence[str], text: bool,
              data: str) -> dict[str, dict[str, Any]]:
    """Each row's runs (`specs` made those rows, in place): {row: {"of": its spec's name, "token_labels": a folder or
    None, "precision": --precision}}. With `token_labels` every spec once more as NAME+tl (refused for text and for a
    head that cannot take them, before any run); with several `precisions` each of those once per precision,
    NAME@P."""
    from .train.token_labels.maps import token_grid  # torch

    rows = {name: {"of": name, "token_labels": None} for name in specs}
    if token_labels is not None:
        if text:
            raise ValueError(f"--token-labels: label maps of images; {data} holds texts")
        for name, (_, spec) in specs.items():
            token_grid(spec)  # a head that cannot take them, refused before any run
            rows[f"{name}{_TOKEN_LABELED}"] = {"of": name, "token_labels": str(token_labels)}
    variants = {f"{name}@{p}" if len(precisions) > 1 else name: {**row, "precision": p}
                for name, row in rows.items() for p in precisions}
    base = dict(specs)
    specs.clear()
    specs.update({name: base[row["of"]] for name, row in variants.items()})
    return variants


def _train_all(specs: dict[str, tuple[Path, Model]], seeds: Sequence[int], recipe, data: DataConfig,
               variants: dict[str, dict[str, Any]], out: Path, device: str, metric: str,
               say: Callable[[str], None]) -> tuple[dict, dict]:
    """Train every row (its `variants` entry: the token labels, the precision) with every seed (`train_seeds`), the
    engine's stdout to stderr; per row its scores (a non-finite one counted as 0, with a note) and its runs' final
    records, each with the precision it trained in (its summary.json's)."""
    from .train.engine import run  # torch

    def train(name: str, seed: int) -> float:
        row, folder = variants[name], out / "runs" / f"{name}-seed{seed}"
        with contextlib.redirect_stdout(sys.stderr):  # the engine's closing line too: stdout is the table's
            final = run(TrainConfig(specs[name][1], recipe, attrs.evolve(data, token_labels=row["token_labels"]),
                                    RunConfig(out=folder, seed=seed, device=device, precision=row["precision"],
                                              log_interval=None, overwrite=True)))  # one progress line per epoch
        score = final[metric]
        if not math.isfinite(score):  # Pearson / Spearman of constant predictions: no correlation
            say(f"note: {name} seed {seed}: {metric} is {score} (constant predictions); counted as 0")
            score = 0.0
        runs.setdefault(name, []).append({"seed": seed, **{k: v if not isinstance(v, float) or math.isfinite(v)
                                                           else None for k, v in final.items()},
                                          "precision": json.loads((folder / "summary.json").read_text())["precision"]})
        return score

    runs: dict[str, list[dict[str, Any]]] = {}
    return train_seeds(list(specs), seeds, train, say), runs


def _rows(specs: dict[str, tuple[Path, Model]], scores: dict, runs: dict, variants: dict[str, dict[str, Any]],
          matched: dict | None, device: str) -> list[dict[str, Any]]:
    """compare.json's row of each spec: its counts, throughput (in its runs' precision), scores and runs."""
    from .profiler import profile  # torch

    rows, labelled = [], any(v["token_labels"] for v in variants.values())
    for name, (path, spec) in specs.items():
        prof, row, precision = profile(spec, crosscheck=False), variants[name], runs[name][0]["precision"]
        rows.append({"name": name, "path": str(path), "params": prof.params, "macs": prof.macs,
                     **({"token_labels": row["token_labels"]} if labelled else {}), "precision": precision,
                     "samples_per_s": throughput(spec, device=device, precision=precision), "scores": scores[name],
                     "score": spread(scores[name]), "runs": runs[name],
                     **({"matched": matched[row["of"]]} if matched else {})})
    return rows


def _environment(device: str) -> dict[str, Any]:
    """compare.json's record of how throughput was timed and of the machine, torch and Python."""
    import torch  # torch

    return {"throughput": {**_THROUGHPUT, "how": f"eval-mode forward of random inputs under no_grad on {device}; "
                                                 f"batch / median time of the timed passes"},
            "torch": torch.__version__, "python": platform.python_version(), "cpu": cpu_name(),
            "threads": torch.get_num_threads(), "load_average": [round(x, 2) for x in os.getloadavg()]}


def compare(paths: Sequence[str | Path], *, data: str, seeds: Sequence[int], recipe, out: Path,
            recipe_name: str = "compare", data_dir: str | None = None, task: str | None = None, command: str = "",
            grid: dict[str, list] | None = None, match: str | None = None, to: str | Path | None = None,
            vary: Sequence[str] | None = None, tolerance: float = 0.02, device: str = "cpu",
            say: Callable[[str], None] = print, max_candidates: int | None = None,
            token_labels: str | None = None, precisions: Sequence[str] = ("auto",)) -> dict[str, Any]:
    """Train every spec in `paths` (each expanded by `grid`; fitted to one budget with `match`) with every seed in
    `seeds`, then write OUT/compare.json and OUT/compare.png; returns the JSON's content. Raises ValueError (with
    DataError and FitError) / SpecError for what cannot be done, before any training.

    Args:
        paths: the specs compared (files, presets, checkpoints); a row each, NAME[k=v,...] with `grid`.
        data: the data set, one of the registry's comparable ones.
        seeds: the seeds each spec is trained with (seed s: every spec's data order, and its weights).
        recipe: the training recipe (a vspec.train.recipes Recipe), shared by every run.
        out: the folder of compare.json, compare.png and each run's own, OUT/runs/NAME-seedS.
        recipe_name: the recipe's name, recorded.
        data_dir: where the data set is (None: its default place).
        task: the text task of `data` (None: its default).
        command: the command line, recorded.
        grid: field -> values, each spec expanded into every combination (None: no grid).
        match: "macs" or "params": every spec but the reference fitted to its count (None: none).
        to: the reference spec of `match` (None: the first).
        vary: the fields `match` varies (None: dim and depth).
        tolerance: the relative deviation from the reference's count that `match` accepts.
        device: where the runs train and the throughput is timed ("cpu", "cuda").
        say: where progress lines and notes go.
        max_candidates: bounds the grid's points and each search, counted before anything is built (None:
            MAX_GRID and fitting.MAX_CANDIDATES).
        token_labels: a folder of label maps: every spec trained twice, NAME without them, NAME+tl with.
        precisions: the runs' --precision (auto, fp32, bf16, fp16); several: every spec trained in each, NAME@P.
    """
    t0 = time.perf_counter()
    text, specs = _requested(paths, data, grid, match, to, vary, device, max_candidates, precisions)
    info = data_info(data, next(iter(specs.values()))[1], data_dir=data_dir, task=task, specs=specs, out=out)
    changed, reference = _at_classes(specs, info, recipe, data, to, text)
    matched = _match_budget(specs, match, reference, vary, tolerance, say, max_candidates) if match else None
    _check_room(specs, recipe.batch_size, out)
    for name in changed:
        say(f"note: {name}: {data} has {info['classes']} classes; num_classes set to {info['classes']}")
    metric = info.pop("metric")
    variants = _variants(specs, token_labels, precisions, text, data)  # NAME+tl: on the token labels; NAME@P
    scores, runs = _train_all(specs, seeds, recipe, DataConfig(data, data_dir=data_dir, task=task,
                                                               tokenizer=info.get("tokenizer")),
                              variants, out, device, metric, say)
    rows = _rows(specs, scores, runs, variants, matched, device)
    result = {
        "command": command, "data": info, "recipe": {"name": recipe_name, **attrs.asdict(recipe)}, "seeds": list(seeds),
        "metric": metric, "metric_name": METRICS.get(metric, metric.replace("_", " ")),
        "noise_test": f"Welch's t-test (unequal variances) of the best spec's mean against each other's over the "
                      f"seeds, two-sided; distinguishable when p < {ALPHA}",
        "match": None if not match else {"what": match, "to": str(to) if to else rows[0]["name"],
                                         "vary": list(vary or ["dim", "depth"]), "tolerance": tolerance},
        "grid": grid or None, "device": device, **_environment(device), "wall_s": time.perf_counter() - t0,
        "specs": rows}
    result["vs_best"] = noise(result)  # per spec: Welch's test of the best against it
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    plot(result, out / "compare.png")
    return result


def say_err(line: str) -> None:
    """A progress line on stderr, flushed at once.

    Args:
        line: the line printed.
    """
    print(line, file=sys.stderr, flush=True)
