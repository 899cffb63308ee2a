"""`vspec show SPEC`: the (overridden) spec as a tree."""

from __future__ import annotations

import argparse
import json
from typing import Any

import attrs

from ..spec import Model, to_dict
from .common import load, printable, spec_args

__all__ = ["HELP", "NAME", "add_parser", "run", "tree"]

NAME, HELP = "show", "print the spec tree"


def add_parser(sub) -> None:
    """Add `vspec show`'s parser (its flags and help) to the command's subparsers.

    Args:
        sub: the `vspec` parser's subparsers action (`vspec.cli.parser`)."""
    s = sub.add_parser(NAME, help=HELP, description="Print the (overridden) spec as a tree.")
    spec_args(s)


def run(args: argparse.Namespace) -> None:
    """Carry out `vspec show` (called by `vspec.cli.main`; its errors become one line and exit 2).

    Args:
        args: the command line as `add_parser`'s parser parsed it."""
    spec = load(args)
    print(f"Model ({printable(args.path)})")
    print("\n".join(tree(spec, 1)))


def _fields(value: Any) -> list[tuple[str, Any]]:
    """(name, value) of a spec's fields, as its JSON has them (a one-stage model: block / depth / dim)."""
    items = [(f.name, getattr(value, f.name)) for f in attrs.fields(type(value))]
    if isinstance(value, Model) and value.isotropic:
        i = [name for name, _ in items].index("stages")
        stage = value.stages[0]
        items[i:i + 1] = [("block", stage.block), ("depth", stage.depth), ("dim", stage.dim)]
    return items


def tree(value: Any, indent: int = 0) -> list[str]:
    """The spec as an indented tree: one line per leaf, a header line per component.

    Args:
        value: the spec, or a part of it.
        indent: the nesting depth of its lines (two spaces each)."""
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
