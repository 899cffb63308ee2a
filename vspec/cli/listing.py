"""`vspec list [PATTERN] [--pretrained]`: the presets, as `timm.list_models` lists models (`vspec.list_models`),
with their family, parameters, MACs and published tags."""

from __future__ import annotations

import argparse
import sys

import attrs

from ..spec import families as family_registry
from ..spec import load_spec, load_weights_table
from ..spec.catalogue import EXAMPLES, list_models, presets
from .tables import format_table, si

__all__ = ["HELP", "NAME", "add_parser", "families", "run"]

NAME, HELP = "list", "list the presets (fnmatch PATTERN, as timm.list_models): family, params, MACs, published tags"
_CORE = {"vspec.spec.vit": "vit", "vspec.spec.swin": "swin"}  # the generic kinds' modules: a body, not a family


def add_parser(sub) -> None:
    """Add `vspec list`'s parser (its flags and help) to the command's subparsers.

    Args:
        sub: the `vspec` parser's subparsers action (`vspec.cli.parser`)."""
    p = sub.add_parser(NAME, help=HELP, description="List the presets whose names match PATTERN (fnmatch: '*sot*', "
                                                    "'deit_*'; default every one) with their family, parameters and "
                                                    "MACs (one image or one sequence, counted on the meta device: no "
                                                    "weights allocated) and the tags of their published weights "
                                                    "(`vspec weights` says more of those). Reads no network.")
    p.add_argument("pattern", nargs="?", default="*", metavar="PATTERN", help="fnmatch pattern of preset names")
    p.add_argument("--pretrained", action="store_true",
                   help="only presets with published weights, one row per name.tag (what create_model takes)")
    p.add_argument("--names", action="store_true", help="print the names only (vspec.list_models), no counting")
    p.add_argument("--examples", action="store_true",
                   help=f"the example specs too ({', '.join(EXAMPLES)}: what the demos and `vspec compare` train, "
                        "not architectures)")


def families(spec) -> str:
    """The families whose kinds `spec` uses ('sot', 'msf + swin'), or its generic body's ('vit', 'swin').

    Args:
        spec: the preset's spec."""
    packages = family_registry.packages()
    found, body = set(), set()

    def walk(obj) -> None:
        if isinstance(obj, (list, tuple)):
            for item in obj:
                walk(item)
            return
        if not attrs.has(type(obj)):
            return
        module = type(obj).__module__
        package = next((p for p in packages if module == p or module.startswith(p + ".")), None)
        if package is not None:
            found.add(package.rsplit(".", 1)[-1])
        elif module in _CORE:
            body.add(_CORE[module])
        for field in attrs.fields(type(obj)):
            walk(getattr(obj, field.name))

    walk(spec)
    return " + ".join([*sorted(found), *sorted(body - {"vit"} if found else body)]) or "vit"


def run(args: argparse.Namespace) -> None:
    """Carry out `vspec list` (called by `vspec.cli.main`; its errors become one line and exit 2).

    Args:
        args: the command line as `add_parser`'s parser parsed it."""
    names = list_models(args.pattern, pretrained=args.pretrained, examples=args.examples)
    if not names:  # as timm's list_models: nothing found is an empty answer, not an error
        if list_models(args.pattern, pretrained=args.pretrained, examples=True):
            hint = " but example specs (--examples lists them)"
        elif args.pretrained:
            hint = " with published weights (`vspec weights` lists those)"
        else:
            hint = " (`vspec list` lists them all)"
        print(f"no preset matches {args.pattern!r}{hint}")
        return
    if args.names:
        print("\n".join(names))
        return
    from ..profiler import profile  # torch

    known = presets()
    table = [["name", "family", "params", "MACs", "tag" if args.pretrained else "published tags"]]
    counted: dict[str, tuple[str, str, str, str]] = {}
    for i, name in enumerate(names):
        base = name.split(".", 1)[0]
        if base not in counted:
            if sys.stderr.isatty():
                print(f"\rcounting {i + 1}/{len(names)}: {base}\033[K", end="", file=sys.stderr, flush=True)
            spec = load_spec(known[base])
            prof = profile(spec, meta=True, crosscheck=False, check_memory=False)
            tags = ", ".join(load_weights_table(known[base])) or "-"
            counted[base] = (families(spec), f"{prof.params / 1e6:.2f} M", si(prof.macs), tags)
        fam, params, macs, tags = counted[base]
        table.append([name, fam, params, macs, name.split(".", 1)[1] if "." in name else tags])
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr, flush=True)
    print(format_table(table))
    what = "published checkpoint" if args.pretrained else "preset"
    print(f"{len(names)} {what}{'s' * (len(names) != 1)}; MACs of one image at the spec's size (a text body: one "
          "sequence of its seq_len); create_model takes name or name.tag")
