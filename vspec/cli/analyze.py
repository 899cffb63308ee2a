"""`vspec analyze PATH`: the figures the families' papers plot (vspec.analysis.analyses(): each family's `ANALYSES`,
its figures in vspec/models/<family>/analysis.py; MSF's projection subspaces and feature norms, msf; Refiner's CKA
feature evolution, cka, and attention maps, maps), one PNG and one JSON each."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .. import analysis
from ..analysis import Analysis
from ..analysis import analyses as _table
from ..extras import missing_extra
from ..spec import Model, SpecError, from_json
from ..spec.catalogue import is_checkpoint
from ..train.data.registry import names
from .common import (
    UsageError,
    check_fit,
    int_in,
    load,
    one_line,
    output_file,
    output_folder,
    positive,
    printable,
    spec_args,
)

__all__ = ["HELP", "MAX_BATCHES", "NAME", "add_parser", "analyses", "indices", "run"]

NAME = "analyze"
HELP = ("the MSF and Refiner papers' analyses: projection subspaces, feature norms, CKA feature evolution, "
        "attention maps")
MAX_BATCHES = 1000  # analyze --batches (the Refiner paper averages over 10)

_SPEC_OUT = "runs/analyze"  # a spec's (or preset's) files by default: not beside it, inside specs/ or a clone


_read: dict[str, tuple] = {}  # "ANALYSES" / "OUTPUTS" -> (the table it was read from, its value)


def __getattr__(name: str):
    """`ANALYSES` (every analysis's name) and `OUTPUTS` (analysis -> the middle of its files' names), read from the
    families' tables (vspec.analysis.analyses) when asked for: the same object until the families change."""
    if name not in ("ANALYSES", "OUTPUTS"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    table = _table()
    if name not in _read or _read[name][0] is not table:
        _read[name] = (table, tuple(table) if name == "ANALYSES" else {n: a.output for n, a in table.items()})
    return _read[name][1]


def analyses(text: str) -> tuple[str, ...]:
    """An argparse type: `all` or a comma-separated list of analyses' names, in the table's order.

    Args:
        text: the flag's value."""
    known = tuple(_table())
    names = [t.strip() for t in text.split(",")]
    if names == ["all"]:
        return known
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected all or a comma-separated list of {', '.join(known)}; "
                                         f"got {text!r}")
    return tuple(n for n in known if n in names)


def _described(name: str, analysis: Analysis) -> str:
    return f"{name} -> PATH_STEM.{analysis.output}.png/.json: {analysis.help}"


def indices(text: str) -> list[int]:
    """An argparse type: comma-separated distinct ints >= 0 (block or head indices).

    Args:
        text: the flag's value."""
    try:
        values = [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints such as 0,5,11; got {text!r}") from None
    if any(v < 0 for v in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct ints >= 0; got {text!r}")
    return values


def add_parser(sub) -> None:
    """Add `vspec analyze`'s parser (its flags and help) to the command's subparsers.

    Args:
        sub: the `vspec` parser's subparsers action (`vspec.cli.parser`)."""
    table = _table()
    a = sub.add_parser(NAME, help=HELP,
                       description="Analyze a model (a vspec checkpoint, .pt, or a spec, randomly initialised) "
                                   "and write a PNG and a JSON per analysis in --out-dir (default: beside a "
                                   f"checkpoint, in its run's folder; {_SPEC_OUT}/ for a spec or a preset). "
                                   f"{' '.join(_described(n, x) for n, x in table.items())} "
                                   "Images: random N(0, 1), or --data's validation images.")
    spec_args(a)
    a.add_argument("--what", type=analyses, default=tuple(table), metavar="LIST",
                   help=f"comma-separated analyses among {', '.join(table)}, or all (default: all, skipping with a "
                        "note those that do not apply to the model; one named that does not apply is an error)")
    a.add_argument("--batch-size", type=positive, metavar="N",
                   help="images per batch (default: " + ", ".join(f"{x.batch_size} for {n}" for n, x in table.items()
                                                             if x.batch_size) + ")")
    a.add_argument("--batches", type=int_in(1, MAX_BATCHES), default=1, metavar="N",
                   help=f"batches the CKA curve is averaged over, 1 to {MAX_BATCHES} (default 1; the paper: 10); "
                        "drawn one at a time")
    a.add_argument("--blocks", type=indices, metavar="I,J,...",
                   help="blocks whose maps are shown, indices over all blocks in forward order from 0 (default: "
                        "4 evenly spaced from the first to the last)")
    a.add_argument("--heads", type=indices, metavar="I,J,...", help="heads shown per block (default: the first 4)")
    a.add_argument("--data", metavar="NAME",
                   help=f"read the images from this dataset's validation split (as tools/eval.py: "
                        f"{', '.join(names('image'))}), resized and centre-cropped to the spec's input size "
                        "(default: random N(0, 1) images)")
    a.add_argument("--data-dir", metavar="DIR", help="the dataset's folder (cifar10, cifar100, imagefolder)")
    a.add_argument("--text", metavar="TEXT",
                   help="a text body's maps: this sentence, tokenised by --tokenizer (truncated to the spec's "
                        "seq_len), its tokens the maps' ticks (default: random token ids, no ticks)")
    a.add_argument("--tokenizer", metavar="DIR",
                   help="with --text: a tokenizer folder (tokenizer.json, or a Hugging Face tokenizer's files; no "
                        "download)")
    a.add_argument("--seed", type=int_in(0, 2**32 - 1, "2**32 - 1"), default=0, metavar="N",
                   help="seed of the initialisation (specs) and the images, 0 to 2**32 - 1 (default 0)")
    a.add_argument("--out-dir", metavar="DIR", help="where to write the PNGs and JSONs, a folder or a new path "
                                                    f"(default: beside a checkpoint; {_SPEC_OUT} for a spec)")


def run(args: argparse.Namespace) -> None:
    """Carry out `vspec analyze` (called by `vspec.cli.main`; its errors become one line and exit 2): the output
    paths and matplotlib checked before any work, the model built (or read from a checkpoint), then each analysis
    run, plotted and written.

    Args:
        args: the command line as `add_parser`'s parser parsed it."""
    import torch  # torch

    source = Path(args.path)
    table = _table()
    what, everything = args.what, args.what == tuple(table)
    sizes = {n: 1 if a.batch_size is None else args.batch_size or a.batch_size for n, a in table.items()}
    folder, files = _outputs(args, source, table)
    _check_pyplot()
    torch.manual_seed(args.seed)
    spec, model = _model(args, source, max(sizes[w] for w in what))
    depth = sum(len(stage.blocks) for stage in model.stages)
    if any(table[w].per_block for w in what) and args.blocks and max(args.blocks) >= depth:
        raise UsageError(f"vspec analyze: error: --blocks: {max(args.blocks)} is out of range: the model has "
                         f"{depth} blocks (0..{depth - 1})")
    images = _images(args, spec)
    sentence, labels = _sentence(args, spec)
    title = f"{printable(source.name)} ({'checkpoint' if source.suffix in ('.pt', '.pth') else 'random init'})"
    for name in what:
        inputs = analysis.Inputs(images, sizes[name], args.batches, args.blocks, args.heads, sentence, labels)
        _analyze(name, model, inputs, everything, folder, files[name], source, title)


def _outputs(args: argparse.Namespace, source: Path, table: dict) -> tuple[Path, dict[str, tuple[Path, Path]]]:
    """The output folder (--out-dir, else beside a checkpoint, else _SPEC_OUT) and each analysis' (png, json) paths,
    checked writable before any work."""
    if args.out_dir or not is_checkpoint(source):
        folder = output_folder("--out-dir", args.out_dir or _SPEC_OUT)
    else:
        folder = source.parent
    files = {name: (output_file("output", folder / f"{source.stem}.{table[name].output}.png"),
                    output_file("output", folder / f"{source.stem}.{table[name].output}.json")) for name in args.what}
    return folder, files


def _check_pyplot() -> None:
    """Before any work: matplotlib is there and imports (one line naming the extra otherwise)."""
    try:
        analysis.pyplot()
    except ImportError as e:  # missing: `needs` named the extra already; installed but broken: name it here
        said = one_line(e) if missing_extra(e) else \
            f"the plots need matplotlib ({one_line(e)}); pip install 'vspec[train]'"
        raise UsageError(f"vspec analyze: error: {said}") from None


def _model(args: argparse.Namespace, source: Path, batch_size: int):
    """(the spec, its model): a checkpoint's trained one (--set refused), else the spec file's or preset's randomly
    initialised; the size guard checked for `batch_size` before building."""
    from ..compiler import build  # torch

    if is_checkpoint(source):
        from ..weights.checkpoint import load_weights  # torch
        from ..weights.loading import load_checkpoint  # torch

        if args.overrides:
            raise SpecError("", "--set applies to spec files, not to a checkpoint's trained model")
        ckpt = load_checkpoint(source)  # refuses NaN / inf weights
        spec = from_json(ckpt["spec"])
        check_fit(spec, batch_size, "analyzing it")
        model = build(spec)
        load_weights(model, ckpt["state_dict"], source)
    else:
        spec = load(args)
        check_fit(spec, batch_size, "analyzing it")
        model = build(spec)
    return spec, model


def _analyze(name: str, model, inputs, everything: bool, folder: Path, paths: tuple[Path, Path], source: Path,
             title: str) -> None:
    """One analysis run, plotted and written (its png and json paths printed); under `all` an analysis the model
    cannot take is skipped with a line, else every failure is one UsageError line."""
    import torch  # torch

    png, out = paths
    try:
        figure = analysis.run(name, model, inputs)
    except analysis.InputError as e:
        raise UsageError(f"vspec analyze: error: {e}") from None
    except analysis.AnalysisError as e:
        if not everything:
            raise UsageError(f"vspec analyze: error: {name}: {e}") from None
        print(f"{name}: skipped: {one_line(e)}")
        return
    except torch.linalg.LinAlgError as e:
        raise UsageError(f"vspec analyze: error: {name}: {one_line(e)}") from None
    if figure.nonfinite is not None:
        raise UsageError(f"vspec analyze: error: {name}: {figure.nonfinite} is NaN or infinite: the model's "
                         "activations overflow")
    folder.mkdir(parents=True, exist_ok=True)
    figure.plot(png, title)
    out.write_text(json.dumps({"source": str(source), **figure.result}, indent=1, allow_nan=False))
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
    import torch  # torch

    from ..train.data.registry import DataError  # torch
    from ..train.text.tokenizer import Tokenizer  # torch

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
    import torch  # torch

    from ..nn.model import example_input  # torch

    if args.data is None:
        def random(count: int, size: int):
            g = torch.Generator().manual_seed(args.seed)
            return (example_input(spec, size, generator=g) for _ in range(count))
        return random
    from ..train.data.registry import DataError  # torch
    from ..train.data.sources import build_datasets  # torch
    from ..train.data.transforms import build_transforms  # torch

    if spec.embedder.text:
        raise SpecError("", "--data: image datasets do not feed a text body (leave --data out: random token ids)")
    try:
        tf = build_transforms(spec.img_size, spec.in_chans, train=False)
        _, val, _ = build_datasets(args.data, img_size=spec.img_size, in_chans=spec.in_chans, train_transform=tf,
                                   eval_transform=tf, data_dir=args.data_dir, seed=args.seed,
                                   num_classes=max(spec.num_classes, 1) if args.data == "synthetic" else None)
        if isinstance(val, torch.utils.data.IterableDataset):  # shards: a stream
            raise DataError(f"{args.data} is read in order, with no random access; use --data imagefolder")
    except DataError as e:
        raise UsageError(f"vspec analyze: error: --data: {one_line(e)}") from None
    order = torch.randperm(len(val), generator=torch.Generator().manual_seed(args.seed)).tolist()

    def data(count: int, size: int):
        if count * size > len(val):
            raise UsageError(f"vspec analyze: error: --data {args.data} has {len(val)} validation images, "
                             f"{count} x {size} asked for")
        return (torch.stack([val[i][0] for i in order[b * size:(b + 1) * size]]) for b in range(count))
    return data
