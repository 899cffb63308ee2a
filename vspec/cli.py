"""The `vspec` command: build, profile, show, analyze and export specs.

Every error is one line on stderr (cut to MAX_LINE characters) and exit code 2. Whatever the command
prints from its input (paths, keys, messages) goes through `printable`: an undecodable byte of a file
name or a terminal escape reaches neither the terminal nor a strict UTF-8 stream raw (both from
`vspec/cli_common.py`, which tools/train.py and tools/eval.py share). Every output path
goes through `output_file` / `output_folder`: only a new path or a regular file (a folder) is written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from .cli_common import OneLineParser, UsageError, one_line, printable
from .spec import (
    Model,
    SpecError,
    Tokens,
    budget,
    conv_layout,
    layout,
    load_spec,
    override,
    parse_assignment,
    to_dict,
    to_json,
)
from .spec.core import show
from .train.recipes import MAX_EPOCHS, RECIPES

MAX_BATCHES = 1000  # analyze --batches (the Refiner paper averages over 10)


def _spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="spec file: .py (defines SPEC), .json or .toml")
    p.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                   help="dotted override, repeatable, e.g. --set block.attention.heads=6 --set head.kind=gap; "
                        "values are JSON (6, 0.1, true, null, [32, 32]) or bare strings")


def _int_in(low: int, high: int | None = None, label: str | None = None):
    """An argparse type: an int in [low, high] (high None: no bound but the memory guard's)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {show(text)}") from None
        if value < low or high is not None and value > high:
            rule = f">= {low}" if high is None else f"in [{low}, {label or high}]"
            raise argparse.ArgumentTypeError(f"must be {rule}, got {show(value)}")
        return value

    parse.__name__ = "int"  # argparse names the type in its own messages
    return parse


_positive = _int_in(1)


def _positive_float(text: str) -> float:
    """An argparse type: a finite float > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {show(text)}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be finite and > 0, got {show(text)}")
    return value


ANALYSES = ("msf", "cka", "maps")


def _analyses(text: str) -> tuple[str, ...]:
    names = [t.strip() for t in text.split(",")]
    if names == ["all"]:
        return ANALYSES
    bad = [n for n in names if n not in ANALYSES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected all or a comma-separated list of {', '.join(ANALYSES)}; "
                                         f"got {text!r}")
    return tuple(n for n in ANALYSES if n in names)


def _indices(text: str) -> list[int]:
    try:
        values = [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints such as 0,5,11; got {text!r}") from None
    if any(v < 0 for v in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct ints >= 0; got {text!r}")
    return values


def _memory_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--no-memory-check", dest="memory_check", action="store_false",
                   help=f"skip the size guard: by default {what}")


def _load(args: argparse.Namespace) -> Model:
    spec = load_spec(args.path)
    return override(spec, dict(parse_assignment(a) for a in args.overrides)) if args.overrides else spec


def parser() -> argparse.ArgumentParser:
    top = OneLineParser(prog="vspec", description="Vision-transformer specs: validate, build, profile, show.")
    sub = top.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")

    b = sub.add_parser("build", help="validate, build and run one forward pass; print a summary",
                       description="Validate and build a spec, run one forward pass on a dummy batch and "
                                   "print per-component parameters and the output shape.")
    _spec_args(b)
    b.add_argument("--json", action="store_true", help="print the (overridden) spec as JSON instead of the summary")
    b.add_argument("--out", metavar="FILE",
                   help="write a checkpoint (spec JSON + weights); reload with vspec.load(FILE); missing "
                        "folders are created; a new path or a regular file (overwritten), nothing else; "
                        "with --save-format folder: a model folder")
    b.add_argument("--save-format", choices=("pt", "folder"), default="pt",
                   help="what --out writes: pt (one checkpoint file; default) or folder (a model folder, "
                        "OUT/config.json + OUT/model.safetensors, the layout Hugging Face tools move; reload with "
                        "vspec.from_pretrained(OUT); OUT is a new path or a folder)")
    b.add_argument("--batch-size", type=_positive, default=1, metavar="N", help="dummy batch size (default 1)")
    _memory_flag(b, "a spec whose weights and forward pass (estimated from the spec) need more than the "
                    "memory available now is refused before anything is allocated")

    p = sub.add_parser("profile", help="parameters and MACs per component",
                       description="Count parameters and MACs (multiply-adds; FLOPs = 2 x MACs) per component "
                                   "and per op kind, on one image (or one sequence of a text body). Attention "
                                   "matmuls and norms are counted.")
    _spec_args(p)
    p.add_argument("--input-size", type=_positive, metavar="N",
                   help="square input size (default: the spec's img_size)")
    p.add_argument("--seq-len", type=_positive, metavar="N",
                   help="a text body's sequence length (default: the spec's embedder.seq_len)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.add_argument("--meta", action="store_true",
                   help="count on the meta device with torch's FlopCounterMode (no weights allocated); "
                        "chosen automatically above 300 M parameters, or when the weights would not fit in the "
                        "memory available now")
    _memory_flag(p, "the count moves to the meta device when the weights would not fit in the memory "
                    "available now, and a spec whose blocks would not fit even there is refused")

    s = sub.add_parser("show", help="print the spec tree", description="Print the (overridden) spec as a tree.")
    _spec_args(s)

    a = sub.add_parser("analyze", help="the MSF and Refiner papers' analyses: projection subspaces, feature "
                                       "norms, CKA feature evolution, attention maps",
                       description="Analyze a model (a vspec checkpoint, .pt, or a spec, randomly initialised) "
                                   "and write a PNG and a JSON per analysis beside PATH (or in --out-dir). "
                                   "msf -> PATH_STEM.analysis.png/.json: (1) the subspace similarity (MSF Eq. 13: "
                                   "the mean cos^2 of the canonical angles, 0..1) of every pair of projection "
                                   "roles QUERY, KEY, VALUE, PROBE, WEIGHT, per layer and averaged over the "
                                   "heads, shown as its mean over the layers (Fig. 3); (2) the mean L2 norm of "
                                   "the token features after the embedding and after each layer (Fig. 4). "
                                   "cka -> PATH_STEM.cka.png/.json: Refiner's feature evolution (appendix Eq. 2, "
                                   "Fig. 2): F_k = CKA(f_k, f_out) / CKA(f_1, f_out), linear CKA between the "
                                   "tokens after block k (each stage of a multi-stage model) and the final "
                                   "features, every token of the batch one example, averaged over --batches. "
                                   "maps -> PATH_STEM.maps.png/.json: the attention maps of one image (the first "
                                   "drawn) in --blocks and --heads, N x N over all tokens (class token first), "
                                   "before and after refinement where a block refines its maps (Fig. 1, "
                                   "Fig. 5); the JSON keeps each map's mean row entropy; window attention is "
                                   "refused. Images: random N(0, 1), or --data's validation images.")
    _spec_args(a)
    a.add_argument("--what", type=_analyses, default=("msf", "cka", "maps"), metavar="LIST",
                   help="comma-separated analyses among msf, cka, maps, or all (default: all, skipping with a "
                        "note those that do not apply to the model; one named that does not apply is an error)")
    a.add_argument("--batch-size", type=_positive, metavar="N",
                   help="images per batch (default: 8 for the feature norms, 32 for CKA as in the paper)")
    a.add_argument("--batches", type=_int_in(1, MAX_BATCHES), default=1, metavar="N",
                   help=f"batches the CKA curve is averaged over, 1 to {MAX_BATCHES} (default 1; the paper: 10); "
                        "drawn one at a time")
    a.add_argument("--blocks", type=_indices, metavar="I,J,...",
                   help="blocks whose maps are shown, indices over all blocks in forward order from 0 (default: "
                        "4 evenly spaced from the first to the last)")
    a.add_argument("--heads", type=_indices, metavar="I,J,...", help="heads shown per block (default: the first 4)")
    a.add_argument("--data", metavar="NAME",
                   help="read the images from this dataset's validation split (as tools/eval.py: digits, cifar10, "
                        "cifar100, imagefolder, synthetic), resized and centre-cropped to the spec's input size "
                        "(default: random N(0, 1) images)")
    a.add_argument("--data-dir", metavar="DIR", help="the dataset's folder (cifar10, cifar100, imagefolder)")
    a.add_argument("--text", metavar="TEXT",
                   help="a text body's maps: this sentence, tokenised by --tokenizer (truncated to the spec's "
                        "seq_len), its tokens the maps' ticks (default: random token ids, no ticks)")
    a.add_argument("--tokenizer", metavar="DIR",
                   help="with --text: a tokenizer folder (tokenizer.json, or a Hugging Face tokenizer's files; no "
                        "download)")
    a.add_argument("--seed", type=_int_in(0, 2**32 - 1, "2**32 - 1"), default=0, metavar="N",
                   help="seed of the initialisation (specs) and the images, 0 to 2**32 - 1 (default 0)")
    a.add_argument("--out-dir", metavar="DIR", help="where to write the PNGs and JSONs (default: beside PATH); "
                                                    "a folder or a new path")

    e = sub.add_parser("export", help="export to ONNX (.onnx) or a torch.export program (.pt2)",
                       description="Export a model (a vspec checkpoint, .pt, or a spec, randomly initialised) in eval "
                                   "mode: --out FILE.onnx (torch.onnx's dynamo exporter; needs pip install "
                                   "'vspec[export]') or FILE.pt2 (torch.export.load). Inputs: pixel_values, or a "
                                   "text body's input_ids and attention_mask; output: logits. The batch axis is "
                                   "dynamic unless --static-batch.")
    _spec_args(e)
    e.add_argument("--out", required=True, metavar="FILE", help="FILE.onnx or FILE.pt2 (the suffix picks the format); "
                                                                  "a new path or a regular file (overwritten)")
    e.add_argument("--batch", type=_int_in(1, 4096), default=2, metavar="N",
                   help="the batch traced, 1 to 4096 (default 2; 2 or more with a dynamic batch)")
    e.add_argument("--static-batch", action="store_true", help="fix the batch axis at --batch")
    e.add_argument("--opset", type=_int_in(18, 30), metavar="N", help="ONNX opset, 18 to 30 (default: torch.onnx's)")
    e.add_argument("--check", action="store_true",
                   help="run the exported model (onnxruntime, or torch) and the eager one on a random batch (--batch "
                        "+ 1 with a dynamic batch) and print the max |difference| of the logits; above 1e-4 is an "
                        "error")

    c = sub.add_parser("compare", help="train several specs on the same data, split, recipe and seeds; tabulate "
                                       "and plot params, MACs, images/s and val top-1",
                       description="Train each SPEC on --data with the same fixed split, recipe and seeds (on the "
                                   "CPU), then write OUT/compare.json (every number and run) and OUT/compare.png "
                                   "(val top-1 against MACs, min-max over the seeds as error bars) and print a "
                                   "markdown table: params, MACs, images/s (eval-mode forward, batch 64), val top-1 "
                                   "mean, std and min-max over the seeds (the last epoch's); the runs in "
                                   "OUT/runs/NAME-seedS.")
    c.add_argument("specs", nargs="+", metavar="SPEC", help="spec files (.py / .json / .toml), named by their stems")
    c.add_argument("--data", default="digits", metavar="NAME",
                   help="digits (default), mnist5k, cifar10, cifar100, imagefolder (as tools/train.py; each spec's "
                        "images resized to its img_size)")
    c.add_argument("--data-dir", metavar="DIR", help="the dataset's folder (cifar10, cifar100, imagefolder)")
    c.add_argument("--seeds", type=_int_in(1, 100), default=3, metavar="N", help="runs per spec, 1 to 100 (default 3)")
    c.add_argument("--seed-base", type=_int_in(0, 2**32 - 1, "2**32 - 1"), default=0, metavar="S",
                   help="the seeds are S, S+1, ..., S+N-1 (default 0)")
    c.add_argument("--recipe", choices=tuple(RECIPES), default="compare",
                   help="tools/train.py's recipes (default compare: AdamW + cosine, no augmentation, 4 epochs at "
                        "batch 64, lr 4e-3)")
    c.add_argument("--epochs", type=_int_in(1, MAX_EPOCHS), metavar="N", help="default: the recipe's")
    c.add_argument("--batch-size", type=_positive, metavar="N", help="default: the recipe's")
    c.add_argument("--lr", type=_positive_float, metavar="LR", help="peak learning rate (default: the recipe's)")
    c.add_argument("--warmup-epochs", type=_int_in(0, MAX_EPOCHS), metavar="N", help="default: the recipe's")
    c.add_argument("--threads", type=_int_in(1, 1024), metavar="N", help="torch's CPU threads (default: torch's)")
    c.add_argument("--out-dir", default="runs/compare", metavar="DIR", help="default runs/compare")
    c.add_argument("--overwrite", action="store_true", help="replace an earlier comparison in OUT (refused without)")
    return top


# ---------------------------------------------------------------- formatting
def _grouped(rows: list[tuple[str, str, int | None, int | None, tuple[int, ...]]],
             stage_labels: Sequence[str]) -> list[tuple[str, int, tuple[int, ...]]]:
    """(name, role, stage, index in stage, values) rows of the model's parts -> (label, repeats, values),
    merging runs of blocks of one stage with equal values ("stages.0.blocks.0-11", 12, values) and
    putting a row with the stage's sums (labelled `stage_labels[i]`) before each stage's parts."""
    out: list[tuple[str, int, tuple[int, ...]]] = []
    run: tuple[int, int] | None = None  # (stage, first block) of the run in out[-1]
    for k, (name, role, stage, index, values) in enumerate(rows):
        if stage is not None and (k == 0 or rows[k - 1][2] != stage):
            sums = tuple(sum(r[4][i] for r in rows if r[2] == stage) for i in range(len(values)))
            out.append((stage_labels[stage], 1, sums))
            run = None
        if role == "block" and run and run[0] == stage and out[-1][2] == values:
            out[-1] = (f"  stages.{stage}.blocks.{run[1]}-{index}", out[-1][1] + 1, values)
            continue
        out.append(("  " * (stage is not None) + name, 1, values))
        run = (stage, index) if role == "block" else None
    return out


def stage_labels(spec: Model, tokens: Sequence[Tokens]) -> list[str]:
    """`stage i: <its tokens>`, and in a two-branch body (Conformer) the CNN map it receives -> hands on."""
    maps = conv_layout(spec)
    labels = [f"stage {i}: {t}" for i, t in enumerate(tokens)]
    if not maps:
        return labels
    ends = [(s.first, s.first + s.depth) for s in layout(spec)]
    return [f"{label}; {maps[a]}" + (f" -> {maps[b]}" if maps[b] != maps[a] else "")
            for label, (a, b) in zip(labels, ends)]


def input_label(spec: Model) -> str:
    """What one sample is: `224x224 input` or, for a text body, `128 tokens`."""
    if spec.embedder.text:
        return f"{spec.embedder.seq_len} tokens"
    return f"{spec.img_size[0]}x{spec.img_size[1]} input"


def describe(spec: Model) -> str:
    """One line on the body: `12 blocks at width 192` or `4 stages of 2/2/6/2 blocks at widths 96/...`."""
    if spec.isotropic:
        return f"{spec.depth} blocks at width {spec.dim}"
    return (f"{len(spec.stages)} stages of {'/'.join(str(s.depth) for s in spec.stages)} blocks at widths "
            f"{'/'.join(str(s.dim) for s in spec.stages)}")


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.4g} {unit}"
    return f"{x:.4g}"


def _count(n: int, times: int, fmt=lambda v: f"{v:,}") -> str:
    return f"{times} x {fmt(n)}" if times > 1 else fmt(n)


def format_table(rows: list[list[str]]) -> str:
    """Columns padded to their widest cell: the first left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                     for r in rows)


def _fields(value: Any) -> list[tuple[str, Any]]:
    """(name, value) of a spec's fields, as its JSON has them (a one-stage model: block / depth / dim)."""
    items = [(f.name, getattr(value, f.name)) for f in attrs.fields(type(value))]
    if isinstance(value, Model) and value.isotropic:
        i = [name for name, _ in items].index("stages")
        stage = value.stages[0]
        items[i:i + 1] = [("block", stage.block), ("depth", stage.depth), ("dim", stage.dim)]
    return items


def tree(value: Any, indent: int = 0) -> list[str]:
    """The spec as an indented tree: one line per leaf, a header line per component."""
    pad = "  " * indent
    lines = []
    for name, v in _fields(value):
        if attrs.has(type(v)):
            kind = getattr(type(v), "kind", None)
            lines.append(f"{pad}{name}: {type(v).__name__}" + (f" ({kind})" if isinstance(kind, str) else ""))
            lines += tree(v, indent + 1)
        elif isinstance(v, tuple) and v and attrs.has(type(v[0])):
            lines.append(f"{pad}{name}: [{len(v)} items]")
            for i, item in enumerate(v):
                lines.append(f"{pad}  [{i}] {type(item).__name__}")
                lines += tree(item, indent + 2)
        else:
            lines.append(f"{pad}{name}: {json.dumps(to_dict(v) if isinstance(v, tuple) else v)}")
    return lines


# ---------------------------------------------------------------- output paths
FILE_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
              (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


def _kind(path: Path) -> str | None:
    """None for a new path (nothing there, not even a dangling link), else what is there: "a regular file",
    "a folder", "a named pipe (FIFO)", ... (following symbolic links); a link that leads nowhere or in a
    circle is a SpecError."""
    try:
        mode = os.stat(path).st_mode
    except NotADirectoryError:  # a file above it: `_parents` names it
        return None
    except FileNotFoundError:
        if os.path.islink(path):
            raise SpecError("", f"{path}: a symbolic link to {os.readlink(path)}, which does not exist") from None
        return None
    except OSError as e:  # a symlink loop, a name too long, no permission
        raise SpecError("", f"{path}: {e.strerror or one_line(e)}") from None
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in FILE_KINDS if test(mode)), "not a regular file")


def _parents(flag: str, path: Path) -> None:
    blocking = next((p for p in path.parents if _kind(p) not in (None, "a folder")), None)
    if blocking is not None:
        raise SpecError("", f"{flag} {path}: {blocking} is {_kind(blocking)}, not a folder")


@contextlib.contextmanager
def _naming(flag: str):
    """A SpecError raised inside says which option it is about (once)."""
    try:
        yield
    except SpecError as e:
        raise SpecError("", e.message if e.message.startswith(flag) else f"{flag} {e.message}") from None


def output_file(flag: str, out: str | Path) -> Path:
    """Where an output file goes (`flag` names the option in the message): a new path or an existing regular
    file (overwritten), never a folder, a named pipe (writing to one blocks until a reader comes), a socket, a
    device or a dangling link; refused before any work is done. Missing folders above it are created when
    it is written."""
    text = str(out)
    path = Path(text)
    with _naming(flag):
        kind = "a folder" if not text or text.endswith(("/", "\\")) else _kind(path)
        if kind == "a folder":
            example = Path(text or ".") / "model.pt"
            raise SpecError("", f"{flag} {text!r}: is a folder; give a file name, e.g. {example}")
        if kind not in (None, "a regular file"):
            raise SpecError("", f"{flag} {path}: is {kind}, not a regular file; give a new path or a file to overwrite")
        _parents(flag, path)
    return path


def output_folder(flag: str, out: str | Path) -> Path:
    """A folder to write into: an existing folder or a new path (created when written), nothing else."""
    path = Path(out)
    with _naming(flag):
        kind = _kind(path)
        if kind not in (None, "a folder"):
            raise SpecError("", f"{flag} {path}: is {kind}, not a folder")
        _parents(flag, path)
    return path


# ---------------------------------------------------------------- commands
def _save(model: Any, path: Path, folder: bool = False) -> None:
    from safetensors import SafetensorError

    from .checkpoint import save
    from .hub import save_pretrained

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        (save_pretrained if folder else save)(model, path)
    except (OSError, RuntimeError, SafetensorError) as e:  # torch.save reports write failures as RuntimeError
        what = "model folder" if folder else "checkpoint"
        raise SpecError("", f"--out {path}: could not write the {what} ({one_line(e)})") from None


def check_fit(spec: Model, batch: int, what: str) -> None:
    """`vspec.compiler.check_fit`, imported when used (torch is not imported for --help)."""
    from .compiler import check_fit as fit

    fit(spec, batch, what)


def cmd_build(args: argparse.Namespace) -> None:
    spec = _load(args)
    folder = args.save_format == "folder"
    out = None if args.out is None else output_folder("--out", args.out) if folder else output_file("--out", args.out)
    if args.memory_check:
        check_fit(spec, args.batch_size, "building it and running a forward pass")
    if args.json:
        print(to_json(spec))
    import torch

    from .compiler import build
    from .profiler import part_params

    t0 = time.perf_counter()
    model = build(spec, check_memory=False).eval()  # checked above, with the forward pass's activations
    x = model.example_input(args.batch_size)
    with torch.no_grad():
        y = model(x)
    elapsed = time.perf_counter() - t0
    if out is not None:
        _save(model, out, folder)
    if args.json:
        return
    parts = model.parts()
    counts = [part_params(p) for p in parts]
    total, trainable, weights = (sum(c[i] for c in counts) for i in range(3))
    rows = [["component", "params"]]
    named = [(p.name, p.role, p.stage, p.index, (c[0],)) for p, c in zip(parts, counts)]
    for name, times, (n,) in _grouped(named, stage_labels(spec, [s.tokens for s in model.layout])):
        rows.append([name, _count(n, times)])
    print(f"{printable(args.path)}: {describe(spec)}, {spec.num_classes} classes, {input_label(spec)}")
    print(format_table(rows))
    print(f"total: {total:,} parameters ({trainable:,} trainable, {weights:,} in linear / conv weights)")
    print(f"forward {tuple(x.shape)} -> {tuple(y.shape)}: finite={bool(torch.isfinite(y).all())}, "
          f"{elapsed:.2f} s to build and run")
    if out is not None:
        print(f"checkpoint: {printable(str(out))}")


def cmd_profile(args: argparse.Namespace) -> None:
    from .profiler import CONVENTIONS, profile

    spec = _load(args)
    text = spec.embedder.text
    if text and args.input_size is not None:
        raise SpecError("", "--input-size: a text body takes no image; give its length with --seq-len")
    if not text and args.seq_len is not None:
        raise SpecError("", "--seq-len: an image model takes no token sequence; give its size with --input-size")
    if args.input_size is not None:
        spec = attrs.evolve(spec, img_size=args.input_size)  # re-validated: the patch must divide it
    if args.seq_len is not None:  # re-validated: the position table must hold it
        spec = attrs.evolve(spec, embedder=attrs.evolve(spec.embedder, seq_len=args.seq_len))
    free = budget.available() if args.memory_check else None
    meta = args.meta
    budget.check(spec, batch=0, tied=True, free=free, what="profiling it on the meta device")
    if not meta:
        from .compiler import weights

        try:
            budget.check(spec, weights=weights(spec), tied=True, free=free, what="profiling it")
        except budget.MemoryBudgetError:  # too large to instantiate: count on the meta device
            meta = True
    t0 = time.perf_counter()
    try:
        prof = profile(spec, meta=True if meta else None, check_memory=False)  # checked above
    except RuntimeError as e:  # what the estimate missed: torch's own size limit
        if "overflow" not in str(e):
            raise
        raise budget.MemoryBudgetError("", f"too large for torch, even on the meta device ({one_line(e)})") from None
    elapsed = time.perf_counter() - t0
    if args.json:
        print(json.dumps(prof.to_dict(), indent=2))
        return
    rows = [["component", "params", "MACs"]]
    named = [(name, c.role, c.stage, c.index, (c.params, c.macs)) for name, c in prof.components.items()]
    labels = stage_labels(spec, [Tokens(s.dim, s.grid, s.prefix, sequence=text) for s in prof.stages])
    for name, times, (n, m) in _grouped(named, labels):
        rows.append([name, _count(n, times), _count(m, times, _si)])
    rows.append(["total", f"{prof.params:,}", _si(prof.macs)])
    print(f"{printable(args.path)} at {input_label(spec).removesuffix(' input')}, batch 1 "
          "(MACs: multiply-adds, FLOPs = 2 x MACs; attention matmuls and norms counted)")
    print(format_table(rows))
    print(f"params: {prof.params:,} total, {prof.params_trainable:,} trainable, "
          f"{prof.params_weights:,} in linear / conv weights (MSF's convention)")
    print("by op: " + ", ".join(f"{op} {_si(v)}" for op, v in sorted(prof.by_op.items(), key=lambda kv: -kv[1])))
    for name, value in prof.conventions.items():
        print(f"paper convention, {CONVENTIONS[name]}: {_si(value)}")
    check = f"; cross-check FlopCounterMode {_si(prof.crosscheck_macs)}" if prof.crosscheck_macs is not None else ""
    print(f"counter: {prof.counter}{check}; {prof.distinct_parts} distinct of {len(prof.components)} parts "
          f"counted in {elapsed:.1f} s")
    if prof.unsupported_ops:
        print(f"unsupported ops (counted as 0): {', '.join(prof.unsupported_ops)}")


def cmd_show(args: argparse.Namespace) -> None:
    spec = _load(args)
    print(f"Model ({printable(args.path)})")
    print("\n".join(tree(spec, 1)))


OUTPUTS = {"msf": "analysis", "cka": "cka", "maps": "maps"}  # analysis -> the middle of its files' names


def cmd_analyze(args: argparse.Namespace) -> None:
    import torch

    from . import analysis as A
    from .compiler import build

    source = Path(args.path)
    what, everything = args.what, args.what == ANALYSES
    sizes = {"msf": args.batch_size or 8, "cka": args.batch_size or 32, "maps": 1}
    folder = output_folder("--out-dir", args.out_dir) if args.out_dir else source.parent
    files = {name: (output_file("output", folder / f"{source.stem}.{OUTPUTS[name]}.png"),
                    output_file("output", folder / f"{source.stem}.{OUTPUTS[name]}.json")) for name in what}
    try:
        A.pyplot()  # before any work: matplotlib is there and imports
    except ImportError as e:
        raise UsageError(f"vspec analyze: error: the plots need matplotlib ({one_line(e)}); "
                         "pip install 'vspec[train]'") from None
    torch.manual_seed(args.seed)
    if source.suffix in (".pt", ".pth") or source.is_dir():  # a checkpoint or a model folder
        from .checkpoint import load_checkpoint, load_weights
        from .spec import from_json

        if args.overrides:
            raise SpecError("", "--set applies to spec files, not to a checkpoint's trained model")
        ckpt = load_checkpoint(source)  # refuses NaN / inf weights
        spec = from_json(ckpt["spec"])
        check_fit(spec, max(sizes[w] for w in what), "analyzing it")
        model = build(spec)
        load_weights(model, ckpt["state_dict"], source)
    else:
        spec = _load(args)
        check_fit(spec, max(sizes[w] for w in what), "analyzing it")
        model = build(spec)
    depth = sum(len(stage.blocks) for stage in model.stages)
    if "maps" in what and args.blocks and max(args.blocks) >= depth:
        raise UsageError(f"vspec analyze: error: --blocks: {max(args.blocks)} is out of range: the model has "
                         f"{depth} blocks (0..{depth - 1})")
    images = _images(args, spec)
    sentence, labels = _sentence(args, spec)
    title = f"{printable(source.name)} ({'checkpoint' if source.suffix in ('.pt', '.pth') else 'random init'})"
    for name in what:
        png, out = files[name]
        try:
            if name == "msf":
                problem = A.msf_problem(model)
                if problem:
                    raise A.AnalysisError(problem)
                result = A.analyze(model, next(images(1, sizes["msf"])))
                plot = lambda: A.plot(result, png, title)  # noqa: E731
            elif name == "cka":
                result = A.feature_evolution(model, images(args.batches, sizes["cka"]))
                plot = lambda: A.plot_cka(result, png, title)  # noqa: E731
            else:
                try:
                    x = next(images(1, 1)) if sentence is None else sentence
                    maps = A.attention_maps(model, x, args.blocks, args.heads)
                except IndexError as e:  # a block or head out of range
                    raise UsageError(f"vspec analyze: error: --heads / --blocks: {e}") from None
                result = {"maps": A.maps_summary(maps)} | ({} if labels is None else {"tokens": labels})
                plot = lambda: A.plot_maps(maps, png, title, labels)  # noqa: E731
            if name == "maps":
                where = next((f"the attention map of block {m['block']}" for m in maps
                              if A.nonfinite_result([m["before"], m["after"]]) is not None), None)
            else:
                where = A.nonfinite_result(result)
        except A.AnalysisError as e:
            if not everything:
                raise UsageError(f"vspec analyze: error: {name}: {e}") from None
            print(f"{name}: skipped: {one_line(e)}")
            continue
        except torch.linalg.LinAlgError as e:
            raise UsageError(f"vspec analyze: error: {name}: {one_line(e)}") from None
        if where is not None:
            raise UsageError(f"vspec analyze: error: {name}: {where} is NaN or infinite: the model's activations "
                             "overflow")
        folder.mkdir(parents=True, exist_ok=True)
        plot()
        out.write_text(json.dumps({"source": str(source), **result}, indent=1, allow_nan=False))
        print(f"{printable(str(png))}\n{printable(str(out))}")


def _sentence(args: argparse.Namespace, spec: Model):
    """--text tokenised by --tokenizer: (input_ids (1, L), the token strings), or (None, None) without --text."""
    if args.text is None and args.tokenizer is None:
        return None, None
    if not spec.embedder.text:
        raise UsageError("vspec analyze: error: --text / --tokenizer: the spec is an image model (a text body's "
                         "embedder is tokens)")
    if args.text is None or args.tokenizer is None:
        raise UsageError("vspec analyze: error: --text and --tokenizer go together (the sentence and its tokenizer)")
    import torch

    from .train.data import DataError
    from .train.text import Tokenizer

    try:
        tokenizer = Tokenizer(args.tokenizer)
    except (DataError, OSError, ValueError) as e:
        raise UsageError(f"vspec analyze: error: --tokenizer: {one_line(e)}") from None
    if tokenizer.vocab_size > spec.embedder.vocab_size:
        raise UsageError(f"vspec analyze: error: --tokenizer: its {tokenizer.vocab_size}-token vocabulary does not "
                         f"fit the spec's embedder.vocab_size {spec.embedder.vocab_size}")
    ids, _ = tokenizer.encode(args.text, None, spec.embedder.seq_len)
    return torch.tensor([ids]), tokenizer.tokens(ids)


def _images(args: argparse.Namespace, spec: Model):
    """images(count, size): an iterator over `count` batches of `size` images, each made when it is asked
    for and the same for every call: random N(0, 1) from --seed, or --data's validation images in an order
    drawn from --seed."""
    import torch

    from .nn.model import example_input

    if args.data is None:
        def random(count: int, size: int):
            g = torch.Generator().manual_seed(args.seed)
            return (example_input(spec, size, generator=g) for _ in range(count))
        return random
    from .train.data import DataError, build_datasets, build_transforms

    if spec.embedder.text:
        raise SpecError("", "--data: image datasets do not feed a text body (leave --data out: random token ids)")
    try:
        tf = build_transforms(spec.img_size, spec.in_chans, train=False)
        _, val, _ = build_datasets(args.data, img_size=spec.img_size, in_chans=spec.in_chans, train_transform=tf,
                                   eval_transform=tf, data_dir=args.data_dir, seed=args.seed,
                                   num_classes=max(spec.num_classes, 1) if args.data == "synthetic" else None)
    except DataError as e:
        raise UsageError(f"vspec analyze: error: --data: {one_line(e)}") from None
    order = torch.randperm(len(val), generator=torch.Generator().manual_seed(args.seed)).tolist()

    def data(count: int, size: int):
        if count * size > len(val):
            raise UsageError(f"vspec analyze: error: --data {args.data} has {len(val)} validation images, "
                             f"{count} x {size} asked for")
        return (torch.stack([val[i][0] for i in order[b * size:(b + 1) * size]]) for b in range(count))
    return data


def cmd_compare(args: argparse.Namespace) -> None:
    from . import compare as C
    from .train.engine import Interrupted, TrainingStopped
    from .train.recipes import resolve

    out = output_folder("--out-dir", args.out_dir)
    for name in C.FILES:
        output_file("--out-dir", out / name)
    if not args.overwrite and any((out / p).exists() for p in (*C.FILES, "runs")):
        raise UsageError(f"vspec compare: error: --out-dir {printable(str(out))} holds an earlier comparison; "
                         "replace it with --overwrite")
    if args.seed_base + args.seeds > 2**32:
        raise UsageError(f"vspec compare: error: --seed-base {args.seed_base} + --seeds {args.seeds} passes 2**32")
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    recipe = resolve(args.recipe, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                     warmup_epochs=args.warmup_epochs)
    seeds = range(args.seed_base, args.seed_base + args.seeds)
    try:
        result = C.compare(args.specs, data=args.data, data_dir=args.data_dir, seeds=seeds, recipe=recipe,
                           recipe_name=args.recipe, out=out, command=C.command_line(args), say=C.say_err)
    except SpecError:
        raise
    except (ValueError, TrainingStopped) as e:  # DataError, a duplicate name: before any training
        raise UsageError(f"vspec compare: error: {one_line(e)}") from None
    except Interrupted as e:
        raise KeyboardInterrupt from e
    print(C.table(result))
    print(f"{printable(str(out / 'compare.json'))}\n{printable(str(out / 'compare.png'))}")


def cmd_export(args: argparse.Namespace) -> None:
    from .export import ExportError, export, target

    out = output_file("--out", args.out)
    try:
        target(out, args.opset, args.check, args.batch, not args.static_batch)  # before any work
    except ExportError as e:
        raise UsageError(f"vspec export: error: {one_line(e)}") from None
    if Path(args.path).suffix in (".pt", ".pth") or Path(args.path).is_dir():  # a checkpoint: vspec.load
        from .checkpoint import load

        if args.overrides:
            raise SpecError("", "--set applies to spec files, not to a checkpoint's trained model")
        model = load(args.path)
    else:
        from .compiler import build

        spec = _load(args)
        check_fit(spec, args.batch + 1, "exporting it")
        model = build(spec, check_memory=False)  # checked above, with the check's batch
    try:
        seconds, checked = export(model, out, batch=args.batch, dynamic_batch=not args.static_batch,
                                  opset=args.opset, verify=args.check)
    except ExportError as e:
        raise UsageError(f"vspec export: error: {one_line(e)}") from None
    print(f"{printable(str(out))}: exported in {seconds:.1f} s")
    if checked is not None:
        print(f"check: max |exported - eager| = {checked.max_abs_diff:.3g} over the logits of a batch of "
              f"{checked.batch} ({checked.runtime})")


COMMANDS = {"build": cmd_build, "profile": cmd_profile, "show": cmd_show, "analyze": cmd_analyze,
            "export": cmd_export, "compare": cmd_compare}


@contextlib.contextmanager
def _tolerant_stdout():
    """While the command runs, a character the stdout's encoding lacks (an ASCII PYTHONIOENCODING and an
    accented file name) is printed as a backslash escape instead of raising UnicodeEncodeError."""
    stdout = sys.stdout
    errors = getattr(stdout, "errors", None)
    if errors != "strict" or not hasattr(stdout, "reconfigure"):
        yield
        return
    stdout.reconfigure(errors="backslashreplace")
    try:
        yield
    finally:
        stdout.reconfigure(errors=errors)


def main(argv: Sequence[str] | None = None) -> int:
    with _tolerant_stdout():
        try:
            args = parser().parse_args(argv)
            COMMANDS[args.command](args)
            sys.stdout.flush()  # here, so that a reader that went away is answered below
        except BrokenPipeError:  # `vspec show spec.py | head -1`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            return 141  # 128 + SIGPIPE, as a command the signal ended
        except UsageError as e:
            print(one_line(e), file=sys.stderr)
            return 2
        except (SpecError, OSError, MemoryError) as e:
            print(f"vspec: error: {one_line(e)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("vspec: interrupted", file=sys.stderr)
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
