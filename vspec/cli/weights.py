"""`vspec weights`: the presets with published weights (their `WEIGHTS`), and what of them is already cached."""

from __future__ import annotations

import argparse
import json

from ..spec import SpecError, load_weights_table
from ..spec.catalogue import preset_ref, presets
from ..spec.weights import Hub, Url
from .tables import format_table

__all__ = ["HELP", "NAME", "add_parser", "cached", "markdown_table", "rows", "run", "source_text"]

_LINE, _MIN_SOURCE = 120, 30  # the table's width, within which the source / score column wraps (at least this wide)
NAME, HELP = "weights", "list the presets with published weights: tags, sources, sizes, licences, scores, cache"


def add_parser(sub) -> None:
    """Add `vspec weights`'s parser (its flags and help) to the command's subparsers.

    Args:
        sub: the `vspec` parser's subparsers action (`vspec.cli.parser`)."""
    w = sub.add_parser(NAME, help=HELP, description="List the presets that declare published weights (WEIGHTS "
                                                    "beside SPEC; the first tag is what pretrained=True loads): "
                                                    "the source, the parameter count of the model loaded, the "
                                                    "licence, the reported score, and whether the weights are "
                                                    "already converted in vspec's cache or downloaded in the "
                                                    "ecosystem's (Hugging Face's, torch hub's). Reads no network.")
    w.add_argument("names", nargs="*", metavar="PRESET[.TAG]",
                   help="only these presets, or one entry as name.tag (default: every one)")
    w.add_argument("--markdown", action="store_true",
                   help="print the table of docs/weights.md (preset, tag, source, params, score, licence) as Markdown")


def source_text(source, markdown: bool = False) -> str:
    """How a table names a source: hub:<repo>/<file>, the URL, or manual:<page>.

    Args:
        source: the entry's source (Hub, Url or a manual download's page).
        markdown: as a markdown link (docs/weights.md)."""
    if isinstance(source, Hub):
        text = f"hub:{source.repo}/{source.file}"
        return f"[{text}]({source.where})" if markdown else text
    if isinstance(source, Url):
        return f"[{source.file}]({source.url})" if markdown else source.url
    return f"manual: [{source.file}]({source.page})" if markdown else f"manual:{source.page} ({source.file})"


def cached(name: str, tag: str, entry) -> str:
    """"converted" (vspec's cache holds the model folder; "converted, unverified" where its source file was
    checked against no published sha256), "downloaded" (the source file is in its cache) or "-".

    Args:
        name: the preset.
        tag: the weights' tag.
        entry: its published-weights entry."""
    from ..weights import cache  # torch
    from ..weights.converted import converted_folder  # torch

    folder = converted_folder(name, tag)
    if folder.is_dir():
        try:
            cfg = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("pretrained_cfg")
        except (OSError, ValueError, AttributeError):
            cfg = None
        return "converted" if isinstance(cfg, dict) and cfg.get("verified") is True else "converted, unverified"
    source = entry.source
    if cache.drop_path(source).is_file():
        return "downloaded"
    if isinstance(source, Hub):
        try:
            from huggingface_hub import try_to_load_from_cache  # extra
        except ImportError:
            return "-"
        cache.check_hub_cache(f"{name} ({tag})", source.repo, source.revision)  # a damaged cache: one line
        hit = try_to_load_from_cache(source.repo, source.file, cache_dir=cache.hf_cache(), revision=source.revision)
        return "downloaded" if isinstance(hit, str) else "-"
    return "-"


def rows(names: list[str] | None = None) -> list[tuple[str, str, object]]:
    """(preset, tag, entry) of every declared weights entry, presets in name order, tags as declared; `names`:
    only those presets (a `name.tag`: that entry alone).

    Args:
        names: presets (or `preset.tag`s) to list; None: every one."""
    known = presets()
    wanted: dict[str, set[str] | None] = {}
    for text in names or ():
        name, tag = preset_ref(text) or (text, None)
        if name not in known:
            raise SpecError("", f"unknown preset {name!r} (`vspec weights` lists the presets with weights)")
        wanted[name] = None if tag is None or wanted.get(name, set()) is None else {*wanted.get(name, ()), tag}
    out = [(name, tag, entry) for name, file in sorted(known.items()) if not wanted or name in wanted
           for tag, entry in load_weights_table(file).items() if wanted.get(name) is None or tag in wanted[name]]
    missing = [f"{n}.{t}" for n, tags in wanted.items() for t in tags or () if (n, t) not in {r[:2] for r in out}]
    if missing:
        raise SpecError("", f"no weights {missing[0]!r} (`vspec weights {missing[0].split('.')[0]}` lists its tags)")
    return out


def _millions(n: int) -> str:
    return f"{n / 1e6:.2f} M"


def run(args: argparse.Namespace) -> None:
    """Carry out `vspec weights` (called by `vspec.cli.main`; its errors become one line and exit 2).

    Args:
        args: the command line as `add_parser`'s parser parsed it."""
    entries = rows(args.names)
    if args.markdown:
        print(markdown_table(entries))
        return

    table = [["preset", "tag", "params", "licence", "source / score", "cache"]]
    first: set[str] = set()
    files = presets()
    for name, tag, entry in entries:
        default = tag == next(iter(load_weights_table(files[name])))  # the first tag declared, shown or not
        first.add(name)
        table.append([name, tag + (" *" if default else ""), _millions(entry.params), entry.licence,
                      f"{source_text(entry.source)}\n{entry.score or '-'}", cached(name, tag, entry)])
    # the source and the score under it, wrapped to what the other columns leave of a line (a header is padded by 2)
    rest = sum(max(max(len(row[i]) for row in table[1:]), len(table[0][i]) + 2) + 2 for i in (0, 1, 2, 3, 5))
    print(format_table(table, "llrlll", [None] * 4 + [max(_LINE - rest, _MIN_SOURCE), None]))
    print(f"{len(entries)} published checkpoint{'s' * (len(entries) != 1)} of {len(first)} preset"
          f"{'s' * (len(first) != 1)}; * the default tag (pretrained=True)\n"
          "manual: a file only a person can download (the error says where to put it)")


def markdown_table(entries: list[tuple[str, str, object]]) -> str:
    """The table of published weights (docs/weights.md).

    Args:
        entries: `rows()`' (preset, tag, entry) rows."""
    lines = ["| preset | tag | source | params | reported score | licence |", "|---|---|---|---|---|---|"]
    for name, tag, entry in entries:
        lines.append(f"| {name} | {tag} | {source_text(entry.source, markdown=True)} | {_millions(entry.params)} | "
                     f"{entry.score or '-'} | {entry.licence} |")
    return "\n".join(lines)
