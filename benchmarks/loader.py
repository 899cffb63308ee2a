"""The training loop at ImageNet's shape (issue 47): N generated JPEGs (sizes around 500 x 375, quality 90,
1,000 classes; noise-textured so that they weigh about what ImageNet's do) as an ImageFolder (and, with --sources,
as `vspec data pack`'s shards, and as a Hugging Face dataset written by `datasets` (issue 61): a save_to_disk folder,
`hf`, and parquet files read with --streaming, `hf_stream`), and, in one process on one device, images/s of, in this
order,
  - the bare training step: deit_small forward + backward + AdamW on one fixed batch (bf16, channels-last on CUDA);
  - timm's own loader (create_loader: the same augmentations in its workers, its CUDA prefetcher) feeding the same
    bare step with timm's Mixup;
  - the whole `vspec train` loop (DeiT's recipe: random resized crop, flip, RandAugment rand-m9-mstd0.5-inc1,
    random erasing 0.25, mixup / cutmix, EMA; drop path 0 so that the model is the bare step's) on each data path:
    decoded on the host (the workers: PIL and timm's transforms) or on the device (nvJPEG and vspec/train/
    data/device_decode.py), from the folder (and the shards); its second epoch, as `vspec train` reports it;
  - each data path alone (its batches made ready on the device, no model), after its loop.
Ratios are against the bare step of the same run. --no-loop measures the data paths alone (no bare step, no loop);
--rounds N measures them N times, each path in turn in each round, a path's figure the median (`sources_table`:
each source against the shards of the same rounds).

Each path (the bare step, timm's loader, each loop with its data path alone) runs under --path-limit; the JSON is
written after every one, so a run cut short keeps the paths it finished.

    python -m benchmarks.loader [--images 5120] [--batch-size 256] [--device cuda] [--workers N] [--path-limit S]
                                [--sources folder,shards,hf,hf_stream] [--no-loop] [--rounds N] [--json FILE]
"""

import argparse
import contextlib
import gc
import json
import os
import signal
import statistics
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

import torch

import vspec
from vspec.train import DataConfig, RunConfig, TrainConfig
from vspec.train.data.registry import names
from vspec.train.data.transforms import patch_posterize
from vspec.train.engine import Training, run
from vspec.train.recipes import resolve

from .common import jpeg, write_json
from .train_overhead import bare

AA, RE = "rand-m9-mstd0.5-inc1", 0.25


def make_folder(root: Path, images: int, classes: int = 1000, val: int | None = None) -> Path:
    """ImageFolder root/train/<class>/*.jpg (`images` of them) and root/val (a tenth), in parallel."""
    jobs, classes = [], min(classes, images)
    for split, n in (("train", images), ("val", val or max(classes, images // 10))):
        for i in range(n):
            folder = root / split / f"n{i % classes:05d}"
            folder.mkdir(parents=True, exist_ok=True)
            jobs.append((folder / f"{i}.jpg", hash((split, i)) % 2**32))
    with Pool(min(16, os.cpu_count() or 1)) as pool:
        pool.map(jpeg, jobs, chunksize=64)
    return root


def hf_copies(folder: Path, out: Path, files: int = 8, row_group: int = 100) -> tuple[Path, Path]:
    """(save_to_disk folder, parquet folder) of the ImageFolder `folder`'s images as a Hugging Face dataset (an
    `Image` column of the files' bytes, a `ClassLabel` of the class folders), written by `datasets` itself: its
    training rows shuffled as `vspec data pack` shuffles them, the parquet files `files` training shards named as
    push_to_hub names them, in row groups of `row_group` rows (push_to_hub's for image sets)."""
    import random

    import datasets

    from vspec.train.data.pack import scan

    datasets.disable_progress_bars()
    classes, listed = scan(folder)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=classes)})
    splits = {}
    for split, name in (("train", "train"), ("val", "validation")):
        rows = list(listed[split])
        if split == "train":
            random.Random(0).shuffle(rows)
        splits[name] = datasets.Dataset.from_dict({"image": [{"bytes": p.read_bytes(), "path": None} for p, _ in rows],
                                                   "label": [label for _, label in rows]}, features=features)
    datasets.DatasetDict(splits).save_to_disk(str(out / "disk"))
    for name, ds in splits.items():
        n = files if name == "train" else 1
        for i in range(n):
            ds.shard(n, i, contiguous=True).to_parquet(str(out / "parquet" / f"{name}-{i:05d}-of-{n:05d}.parquet"),
                                                       batch_size=row_group)
    return out / "disk", out / "parquet"


def _cfg(spec, out: Path, batch: int, data: DataConfig, device: str, workers, decode_on: str, epochs: int = 2,
         decode_in: str = "auto"):
    recipe = resolve("deit", epochs=epochs, batch_size=batch, drop_path=0.0)
    return TrainConfig(spec, recipe, data, RunConfig(out=out, device=device, workers=workers, log_interval=None,
                                                     decode_on=decode_on, decode_in=decode_in))


def loop(spec, batch: int, data: DataConfig, device: str, workers, decode_on: str, decode_in: str = "auto") -> float:
    """Images/s `vspec train` reports for its second epoch (workers and model warm)."""
    with tempfile.TemporaryDirectory() as tmp:
        run(_cfg(spec, Path(tmp) / "run", batch, data, device, workers, decode_on, decode_in=decode_in))
        records = [json.loads(line) for line in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
        return records[1]["images_per_s"]


def data_path(spec, batch: int, data: DataConfig, device: str, workers, decode_on: str,
              decode_in: str = "auto") -> float:
    """Images/s of the loop's batches made ready on the device (`task.batches`), no model; the first excluded."""
    with tempfile.TemporaryDirectory() as tmp:
        t = Training(_cfg(spec, Path(tmp) / "run", batch, data, device, workers, decode_on, epochs=1,
                          decode_in=decode_in))
        t.setup(model=False)
        batches = t.batches(0, ahead=False)
        next(batches)
        t0, n = time.perf_counter(), 0
        for images, _ in batches:
            n += len(images)
        if device == "cuda":
            torch.cuda.synchronize()
        return n / (time.perf_counter() - t0)


def timm_train_loader(spec, folder: Path, batch: int, device: str, workers: int):
    """timm's create_loader over folder/train with the augmentations of vspec's loop (its prefetcher on CUDA), its
    posterize patched as vspec's training transforms are (`patch_posterize`: timm's own raises under Pillow >= 13
    on ~1 image in 700)."""
    from timm.data import create_dataset, create_loader

    ds = create_dataset("", root=str(folder / "train"))
    loader = create_loader(ds, input_size=(3, *spec.img_size), batch_size=batch, is_training=True,
                           use_prefetcher=device == "cuda", auto_augment=AA, re_prob=RE, interpolation="bicubic",
                           num_workers=workers, persistent_workers=workers > 0, device=torch.device(device))
    patch_posterize(ds.transform.transforms)  # before the workers start (the first pass)
    return loader


def timm_loader(spec, folder: Path, batch: int, device: str, workers: int, model: bool) -> float:
    """Images/s of timm's create_loader (`timm_train_loader`) over folder/train, feeding the bare step with timm's
    Mixup (or, without `model`, nothing); the second pass over the data, timed."""
    from timm.data import Mixup

    cuda = device == "cuda"
    loader = timm_train_loader(spec, folder, batch, device, workers)
    mixup = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=spec.num_classes)
    net = vspec.build(spec).train().to(device)
    if cuda:
        net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.05)
    rate = 0.0
    for _ in range(2):  # the first pass warms the workers and the model
        t0, n = time.perf_counter(), 0
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            if model:
                x, y = mixup(x, y)
                opt.zero_grad(set_to_none=True)
                with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
                    loss = torch.sum(-y * torch.log_softmax(net(x).float(), -1), -1).mean()
                loss.backward()
                opt.step()
            n += len(x)
        if cuda:
            torch.cuda.synchronize()
        rate = n / (time.perf_counter() - t0)
    return rate


def table(result: dict) -> str:
    """The speed page's table of a committed result (docs/gpu/loader/<device>.json: its runs; a run's device
    path once per way of preparing batches ahead, --decode-in)."""
    first = result["loader"][0]
    lines = [f"{result['device']}, {result['cpu_cores']} CPU cores, torch {result['torch']}, {result['date']}: "
             f"{first['model']}, batch {first['batch']}, img/s (of the bare step):", "",
             "| run | workers | device path ahead by | bare step | loop, host decoding | loop, device decoding | "
             "timm's loader + step | data path: host / device / timm |", "|---|---|---|---|---|---|---|---|"]

    def cell(r, key, part="loop"):
        v = r.get(key) or {}
        return f"{v[part]:.0f} ({v[part] / r['bare']:.3f})" if part in v else "-"

    for r in result["loader"]:
        variants = [(r.get("ahead", "main"), "folder_device")] + [(k.removeprefix("folder_device_"), k) for k in r
                                                                  if k.startswith("folder_device_")]
        for ahead, key in variants:
            paths = " / ".join(f"{r[k]['data_path']:.0f}" if "data_path" in r.get(k, {}) else "-"
                               for k in ("folder_host", key, "timm"))
            lines.append(f"| {r['run']} | {r['workers']} | {ahead} | {r['bare']:.0f} | {cell(r, 'folder_host')} | "
                         f"{cell(r, key)} | {cell(r, 'timm')} | {paths} |")
    return "\n".join(lines)


SOURCES = {"folder": "ImageFolder: the JPEG files (--data imagefolder)",
           "shards": "vspec data pack's shards (--data shards)",
           "hf": "a save_to_disk folder: arrow, memory-mapped (--data hf)",
           "hf_stream": "parquet files, streamed (--data hf --streaming)"}


def sources_table(result: dict, path: str = "host") -> str:
    """The speed page's table of one run's data sources (docs/cpu/loader.json): each source's data path alone, the
    median of its rounds and their range, and against the shards' of the same rounds (the median of the rounds'
    ratios)."""
    ref = result[f"shards_{path}"].get("data_path_rounds") or [result[f"shards_{path}"]["data_path"]]
    lines = [f"{result['device']}, {result['cpu_cores']} CPU cores, torch {result['torch']}, {result['date']}: "
             f"{result['images']} JPEGs of {result['jpeg_kb']:.0f} KB on average, {result['model']}'s training "
             f"transforms at {result['img_size']} px, batch {result['batch']}, {result['workers']} workers, "
             f"{len(ref)} rounds; img/s of each data path alone:", "",
             "| data | img/s | rounds | of the shards' |", "|---|---|---|---|"]
    for source, name in SOURCES.items():
        r = result.get(f"{source}_{path}")
        if not r or "data_path" not in r:
            continue
        rounds = r.get("data_path_rounds") or [r["data_path"]]
        ratio = statistics.median(a / b for a, b in zip(rounds, ref, strict=False))
        lines.append(f"| {name} | {r['data_path']:.0f} | {min(rounds):.0f}-{max(rounds):.0f} | {ratio:.3f} |")
    return "\n".join(lines)


class Overrun(BaseException):
    """A path ran past --path-limit (a BaseException: the loop's `except Exception`s let it through)."""


@contextlib.contextmanager
def deadline(seconds: float):
    """Overrun raised in this (the main) thread after `seconds` (0: no limit). A path stuck inside one C call is
    cut when the call returns, or by gpu_check.sh's `timeout`: the JSON keeps the paths finished before."""
    def expire(signum, frame):
        raise Overrun

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Figures:
    """The result, written to `json` (when given) after every path, atomically: a run killed at any point leaves
    the paths it finished. `out["paths"]`: each path's end, in the order run: done, timed out (its figures so far
    kept), an error (the next runs all the same), or stopped by a signal (the run ends)."""

    def __init__(self, out: dict, json_path: Path | None):
        self.out, self.json = dict(out, paths={}, complete=False), json_path

    def save(self) -> None:
        out = self.out
        for key, v in out.items():
            if isinstance(v, dict) and "loop" in v and out.get("bare"):
                v["of_bare"] = v["loop"] / out["bare"]
        best = max((v["loop"] for k, v in out.items() if "_device" in k and "loop" in v), default=None)
        if best and "loop" in out.get("timm", {}):
            out["device_over_timm"] = best / out["timm"]["loop"]
        if self.json is not None:
            write_json(self.json, out, atomic=True)

    def measure(self, key: str, limit: float, parts: dict, flat: bool = False) -> dict:
        """The path `key`: each of `parts` (figure name: its function) in turn, under `limit` seconds together;
        the figures in out[key] (flat: in out itself)."""
        got = self.out if flat else self.out.setdefault(key, {})
        t0 = time.perf_counter()
        try:
            with deadline(limit):
                for name, figure in parts.items():
                    got[name] = figure()
            self.out["paths"][key] = "done"
        except Overrun:
            self.out["paths"][key] = f"timed out: over its {limit:g} s (--path-limit)"
        except Exception as e:  # one path failing leaves the others' figures
            self.out["paths"][key] = f"error: {type(e).__name__}: {e}"
        except BaseException as e:  # SIGTERM (the loop's Interrupted), Ctrl-C: the run ends, its figures kept
            self.out["paths"][key] = f"stopped: {type(e).__name__}"
            self.save()
            raise
        finally:
            gc.collect()  # an interrupted path's model and batches
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        self.save()
        print(f"{key}: {self.out['paths'][key]} in {time.perf_counter() - t0:.1f} s: "
              f"{json.dumps({k: got[k] for k in parts if k in got})}", flush=True)
        return got


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=5120, help="training JPEGs (a tenth more for validation)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--workers", type=int, default=None, help="data workers (default: the loop's own choice)")
    ap.add_argument("--model", default="deit_small")
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=20, help="timed steps of the bare step")
    ap.add_argument("--paths", default="host,device", help="the loop's decode paths to run (host, device)")
    ap.add_argument("--ahead", default="main", help="device path: who prepares the next batches, one or both of "
                                                    "main, workers (--decode-in)")
    ap.add_argument("--sources", default="folder", help="the loop's data, some of folder, shards (vspec data "
                                                        "pack's), hf (a save_to_disk folder: arrow, memory-mapped), "
                                                        "hf_stream (parquet files, --streaming)")
    ap.add_argument("--no-timm", action="store_true", help="leave timm's loader out")
    ap.add_argument("--no-loop", action="store_true", help="each data path alone, not the loop on it")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of the data paths, each path in turn in each; a "
                                                          "path's figure the median of its rounds")
    ap.add_argument("--path-limit", type=float, default=0, metavar="S",
                    help="seconds each path may take (the bare step, timm's loader, each loop and its data path); "
                         "one over is recorded as timed out and the next runs (default 0: no limit)")
    ap.add_argument("--data-dir", type=Path, help="use this ImageFolder instead of generating one")
    ap.add_argument("--json", type=Path, help="also write the figures here, after every path")
    args = ap.parse_args(argv)
    spec = vspec.override(vspec.load_spec(args.model), {"num_classes": 1000,
                                                        "img_size": [args.img_size, args.img_size]})
    workers = args.workers
    if workers is None:
        from vspec.train.distributed import workers_for

        workers = workers_for(None, torch.device(args.device))
    fig = Figures({"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "model": args.model,
                   "batch": args.batch_size, "images": args.images, "cpu_cores": len(os.sched_getaffinity(0)),
                   "workers": workers, "torch": torch.__version__, "img_size": args.img_size,
                   "date": time.strftime("%Y-%m-%d")}, args.json)
    out, limit, batch, device = fig.out, args.path_limit, args.batch_size, args.device
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        folder = args.data_dir or make_folder(Path(tmp) / "folder", args.images)
        sizes = [p.stat().st_size for p in (folder / "train").rglob("*.jpg")]
        out["jpeg_kb"] = sum(sizes) / len(sizes) / 1000
        print(f"{len(sizes)} JPEGs, {out['jpeg_kb']:.0f} KB on average, made in {time.perf_counter() - t0:.1f} s; "
              f"{args.model}, batch {batch}, {device}, {out['cpu_cores']} cores, {workers} workers", flush=True)
        fig.save()
        if not args.no_loop:  # the loops' reference; the data paths alone need no model
            fig.measure("bare", limit, {"bare": lambda: bare(spec, args.steps, batch, device)}, flat=True)
        if not args.no_timm:  # early: the reference, before the paths that may take their whole limit
            fig.measure("timm", limit, {"loop": lambda: timm_loader(spec, folder, batch, device, workers, True),
                                        "data_path": lambda: timm_loader(spec, folder, batch, device, workers,
                                                                         False)})
        sources = {"folder": DataConfig("imagefolder", data_dir=str(folder))}
        if "shards" in args.sources.split(",") and "shards" in names():
            shards = Path(tmp) / "shards"
            from vspec.cli import main as cli

            cli(["data", "pack", str(folder), str(shards)])
            sources["shards"] = DataConfig("shards", data_dir=str(shards))
        if {"hf", "hf_stream"} & set(args.sources.split(",")) and "hf" in names():
            disk, parquet = hf_copies(folder, Path(tmp) / "hf")
            sources["hf"] = DataConfig("hf", data_dir=str(disk))
            sources["hf_stream"] = DataConfig("hf", data_dir=str(parquet), streaming=True)
        runs = [(p, a) for p in args.paths.split(",") for a in (args.ahead.split(",") if p == "device" else [""])]
        keys = []
        for source in args.sources.split(","):
            data = sources.get(source)
            for path, ahead in runs if data is not None else ():
                key = f"{source}_{path}" + (f"_{ahead}" if ahead and ahead != "main" else "")
                # a stream's workers read their files in order: they decode under --decode-in main (auto's)
                keys.append((key, data, path, "workers" if ahead == "workers" and source in ("folder", "hf")
                             else "auto"))
        for r in range(args.rounds):  # the paths in turn, round after round: a machine's drift falls on each
            for key, data, path, decode_in in keys:
                parts = {} if r or args.no_loop else {
                    "loop": lambda: loop(spec, batch, data, device, workers, path, decode_in)}
                parts[f"data_path_{r + 1}" if args.rounds > 1 else "data_path"] = \
                    lambda: data_path(spec, batch, data, device, workers, path, decode_in)
                fig.measure(key, limit, parts)
        if args.rounds > 1:
            for key, *_ in keys:
                got = out[key]
                got["data_path_rounds"] = [got.pop(f"data_path_{r + 1}") for r in range(args.rounds)
                                           if f"data_path_{r + 1}" in got]
                if got["data_path_rounds"]:
                    got["data_path"] = statistics.median(got["data_path_rounds"])
    out["complete"] = True
    fig.save()
    return out


if __name__ == "__main__":
    main()
