"""The `vspec` command: build, profile, show and analyze specs.

Every error is one line on stderr (cut to MAX_LINE characters) and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import attrs

from .spec import Model, SpecError, Tokens, budget, load_spec, override, parse_assignment, to_dict, to_json

MAX_LINE = 500  # characters of an error line; a longer message is cut


class UsageError(Exception):
    """A bad command line."""


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage + error over several lines; vspec's commands report one line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message} (see --help)")


def _spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="spec file: .py (defines SPEC), .json or .toml")
    p.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                   help="dotted override, repeatable, e.g. --set block.attention.heads=6 --set head.kind=gap; "
                        "values are JSON (6, 0.1, true, null, [32, 32]) or bare strings")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


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
                        "folders are created")
    b.add_argument("--batch-size", type=_positive, default=1, metavar="N", help="dummy batch size (default 1)")
    _memory_flag(b, "a spec whose weights and forward pass (estimated from the spec) need more than the "
                    "memory available now is refused before anything is allocated")

    p = sub.add_parser("profile", help="parameters and MACs per component",
                       description="Count parameters and MACs (multiply-adds; FLOPs = 2 x MACs) per component "
                                   "and per op kind, on one image. Attention matmuls and norms are counted.")
    _spec_args(p)
    p.add_argument("--input-size", type=_positive, metavar="N",
                   help="square input size (default: the spec's img_size)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.add_argument("--meta", action="store_true",
                   help="count on the meta device with torch's FlopCounterMode (no weights allocated); "
                        "chosen automatically above 300 M parameters, or when the weights would not fit in the "
                        "memory available now")
    _memory_flag(p, "the count moves to the meta device when the weights would not fit in the memory "
                    "available now, and a spec whose blocks would not fit even there is refused")

    s = sub.add_parser("show", help="print the spec tree", description="Print the (overridden) spec as a tree.")
    _spec_args(s)

    a = sub.add_parser("analyze", help="the MSF paper's analyses: projection subspaces and feature norms",
                       description="Analyze a model (a vspec checkpoint, .pt, or a spec, randomly initialised) "
                                   "as the MSF paper does and write PATH_STEM.analysis.png and .json beside it "
                                   "(or in --out-dir): (1) the subspace similarity (Eq. 13: the mean cos^2 of "
                                   "the canonical angles, 0..1) of every pair of projection roles QUERY, KEY, "
                                   "VALUE, PROBE, WEIGHT, per layer and averaged over the heads; the PNG shows "
                                   "its mean over the layers as a heatmap (Fig. 3); (2) the mean L2 norm of the "
                                   "token features after the embedding and after each layer (Fig. 4), read "
                                   "through forward_intermediates on a batch of random N(0, 1) images.")
    _spec_args(a)
    a.add_argument("--batch-size", type=_positive, default=8, metavar="N",
                   help="images in the batch for the feature norms (default 8)")
    a.add_argument("--seed", type=int, default=0, help="seed of the initialisation (specs) and the batch")
    a.add_argument("--out-dir", metavar="DIR", help="where to write the PNG and the JSON (default: beside PATH)")
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


# ---------------------------------------------------------------- commands
def _out_path(out: str) -> Path:
    """Where `--out` writes: refused when it names a folder or lies under a file (before any build)."""
    path = Path(out)
    if not out or path.is_dir() or out.endswith(("/", "\\")):
        raise SpecError("", f"--out {out!r}: is a folder; give a file name, e.g. {Path(out or '.') / 'model.pt'}")
    blocking = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise SpecError("", f"--out {out}: {blocking} is a file, not a folder")
    return path


def _save(model: Any, path: Path) -> None:
    from .checkpoint import save

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save(model, path)
    except (OSError, RuntimeError) as e:  # torch.save reports write failures as RuntimeError
        raise SpecError("", f"--out {path}: could not write the checkpoint ({one_line(e)})") from None


def cmd_build(args: argparse.Namespace) -> None:
    spec = _load(args)
    out = _out_path(args.out) if args.out is not None else None
    if args.memory_check:
        budget.check(spec, args.batch_size, what="building it and running a forward pass")
    if args.json:
        print(to_json(spec))
    import torch

    from .compiler import build
    from .profiler import part_params

    t0 = time.perf_counter()
    model = build(spec, check_memory=False).eval()  # checked above, with the forward pass's activations
    x = torch.randn(args.batch_size, spec.in_chans, *spec.img_size)
    with torch.no_grad():
        y = model(x)
    elapsed = time.perf_counter() - t0
    if out is not None:
        _save(model, out)
    if args.json:
        return
    parts = model.parts()
    counts = [part_params(p) for p in parts]
    total, trainable, weights = (sum(c[i] for c in counts) for i in range(3))
    rows = [["component", "params"]]
    named = [(p.name, p.role, p.stage, p.index, (c[0],)) for p, c in zip(parts, counts)]
    for name, times, (n,) in _grouped(named, [f"stage {s.index}: {s.tokens}" for s in model.layout]):
        rows.append([name, _count(n, times)])
    print(f"{args.path}: {describe(spec)}, {spec.num_classes} classes, {spec.img_size[0]}x{spec.img_size[1]} input")
    print(format_table(rows))
    print(f"total: {total:,} parameters ({trainable:,} trainable, {weights:,} in linear / conv weights)")
    print(f"forward {tuple(x.shape)} -> {tuple(y.shape)}: finite={bool(torch.isfinite(y).all())}, "
          f"{elapsed:.2f} s to build and run")
    if out is not None:
        print(f"checkpoint: {out}")


def cmd_profile(args: argparse.Namespace) -> None:
    from .profiler import CONVENTIONS, profile

    spec = _load(args)
    if args.input_size is not None:
        spec = attrs.evolve(spec, img_size=args.input_size)  # re-validated: the patch must divide it
    free = budget.available() if args.memory_check else None
    meta = args.meta
    if not meta:
        try:
            budget.check(spec, weights="distinct", free=free, what="profiling it")
        except budget.MemoryBudgetError:  # too large to instantiate: count on the meta device
            meta = True
    budget.check(spec, batch=0, weights=None, free=free, what="profiling it on the meta device")
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
    labels = [f"stage {s.index}: {Tokens(s.dim, s.grid, s.prefix)}" for s in prof.stages]
    for name, times, (n, m) in _grouped(named, labels):
        rows.append([name, _count(n, times), _count(m, times, _si)])
    rows.append(["total", f"{prof.params:,}", _si(prof.macs)])
    print(f"{args.path} at {prof.input_size[0]}x{prof.input_size[1]}, batch 1 "
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
    print(f"Model ({args.path})")
    print("\n".join(tree(spec, 1)))


def cmd_analyze(args: argparse.Namespace) -> None:
    import torch

    from .analysis import analyze, plot

    source = Path(args.path)
    torch.manual_seed(args.seed)
    if source.suffix in (".pt", ".pth"):
        from .checkpoint import load_checkpoint, load_weights
        from .compiler import build
        from .spec import from_json

        if args.overrides:
            raise SpecError("", "--set applies to spec files, not to a checkpoint's trained model")
        ckpt = load_checkpoint(source)
        spec = from_json(ckpt["spec"])
        budget.check(spec, args.batch_size, what="analyzing it")
        model = build(spec)
        load_weights(model, ckpt["state_dict"], source)
    else:
        from .compiler import build

        spec = _load(args)
        budget.check(spec, args.batch_size, what="analyzing it")
        model = build(spec)
    x = torch.randn(args.batch_size, spec.in_chans, *spec.img_size, generator=torch.Generator().manual_seed(args.seed))
    result = analyze(model, x)
    folder = Path(args.out_dir) if args.out_dir else source.parent
    folder.mkdir(parents=True, exist_ok=True)
    png, out = folder / f"{source.stem}.analysis.png", folder / f"{source.stem}.analysis.json"
    plot(result, png, f"{source.name} ({'checkpoint' if source.suffix in ('.pt', '.pth') else 'random init'})")
    out.write_text(json.dumps({"source": str(source), **result}, indent=1))
    print(f"{png}\n{out}")


COMMANDS = {"build": cmd_build, "profile": cmd_profile, "show": cmd_show, "analyze": cmd_analyze}


def one_line(e: BaseException, limit: int = MAX_LINE) -> str:
    """An exception as one line: its message with line breaks folded, cut to `limit` characters; the
    type's name when the message is empty."""
    try:
        text = " ".join(str(e).split())
    except Exception:  # noqa: BLE001 - a message that cannot be rendered
        text = ""
    text = text or type(e).__name__
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit:,} more characters]"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        COMMANDS[args.command](args)
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
