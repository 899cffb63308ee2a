"""The generated pages of the documentation site: the CLI reference (every parser's help, as argparse prints it)
and the API reference (every public function and class with its signature and docstring). `mkdocs build` runs
this file as a hook (mkdocs.yml: `hooks`), so the pages are made from the code at each build and never committed;
`python tools/docs_reference.py cli|api` prints one."""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import os
import sys

# The API reference: (module, names) in page order; None takes the module's __all__, else its public names
# defined in it; a dotted name is a class's method. The spec classes are grouped by the module that defines them
# (the core's, then each family's).
API = [
    ("vspec", ["build", "profile", "Profile", "load", "save", "create_model", "save_pretrained", "from_pretrained",
               "register_timm", "register_hf", "fit", "example_input", "fast_paths", "register_family", "head_loss"]),
    ("vspec.spec", ["load_spec", "override", "parse_assignment", "to_json", "from_json", "to_toml", "from_toml",
                    "to_dict", "from_dict", "layout", "state_layout", "SpecError", "MemoryBudgetError"]),
    ("vspec.factory", ["FeatureModel"]),
    ("vspec.hf", ["VspecConfig", "VspecModel", "VspecForSequenceClassification", "VspecForImageClassification"]),
    ("vspec.nn.model", ["Transformer", "Transformer.set_training_outputs", "Transformer.set_grad_checkpointing",
                        "Transformer.group_matcher"]),
    ("vspec.nn.head_outputs", ["HeadOutput", "head_loss"]),
    ("vspec.fitting", ["FitResult", "FitError"]),
    ("vspec.compare", None),
    ("vspec.convert", None),
    ("vspec.weights.resample", None),
    ("vspec.weights.loading", None),
    ("vspec.weights.published", None),
    ("vspec.weights.converted", None),
    ("vspec.export", None),
    ("vspec.spec.paper", None),
    ("vspec.analysis", None),
    ("vspec.models.msf.analysis", None),
    ("vspec.models.refiner.analysis", None),
    ("vspec.train.config", ["TrainConfig", "DataConfig", "RunConfig"]),
    ("vspec.train.recipes", ["resolve"]),
    ("vspec.train.data.registry", ["DataSet", "register_dataset", "unregister_dataset"]),
    ("vspec.train.engine", ["run"]),
]
SPEC_CLASSES = "vspec.spec"  # every class in its __all__ and the families' (`__getattr__`), by defining module


def cli_reference() -> str:
    """Markdown: `vspec --help`, then each subcommand's help (train and eval: tools/train.py's and eval.py's; label:
    its own parser's)."""
    from vspec import cli
    from vspec.cli.eval import eval_parser
    from vspec.cli.label import label_parser
    from vspec.cli.train import train_parser

    top = cli.parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    parsers = {"vspec": top}
    for name in cli.COMMANDS:  # each command, then its own commands (vspec data pack)
        parsers[f"vspec {name}"] = sub.choices[name]
        nested = [a for a in sub.choices[name]._actions if isinstance(a, argparse._SubParsersAction)]
        parsers.update({f"vspec {name} {action}": p for a in nested for action, p in a.choices.items()})
    parsers.update({"vspec train": train_parser("vspec train"), "vspec eval": eval_parser("vspec eval"),
                    "vspec label": label_parser("vspec label")})
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: one width for the page
    try:
        helps = {name: p.format_help().rstrip() for name, p in parsers.items()}
    finally:
        os.environ.pop("COLUMNS") if columns is None else os.environ.__setitem__("COLUMNS", columns)
    out = ["# CLI reference", "",
           "Generated from the command's own parsers at each build (`tools/docs_reference.py`); the same text as "
           "`vspec COMMAND --help`. A guide to the command: [The vspec command](../commands.md).", ""]
    for name, text in helps.items():
        out += [f"## {name}", "", "```text", text, "```", ""]
    return "\n".join(out)


def _public(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_") and (inspect.isfunction(v) or
                 inspect.isclass(v)) and getattr(v, "__module__", None) == module.__name__]
    return list(names)


SECTIONS = ("Args", "Attributes", "Returns", "Raises")  # a docstring's Google-style sections, listed


def _markdown(doc: str) -> str:
    """A docstring for the page: each Google-style section (`Args:` and its entries indented under it, an entry's
    longer text indented further) as a bold heading and a list, one item per entry; the rest as written."""
    out: list[str] = []
    section = None
    for line in doc.splitlines():
        if line.endswith(":") and line[:-1] in SECTIONS:
            section = line[:-1]
            out += [f"**{section}:**", ""]
        elif section and line.startswith("        "):  # an entry's text, continued
            out[-1] += " " + line.strip()
        elif section and line.startswith("    "):
            name, colon, text = line.strip().partition(": ")
            named = colon and section in ("Args", "Attributes") and name.isidentifier()
            out.append(f"- `{name}`: {text}" if named else f"- {line.strip()}")
        else:
            if section and line.strip():
                out.append("")
            section = None
            out.append(line)
    return "\n".join(out)


def _entry(name: str, obj) -> list[str]:
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        sig = ""
    kind = "class" if inspect.isclass(obj) else "def" if callable(obj) else ""
    doc = inspect.getdoc(obj) if callable(obj) else None
    head = f"{kind} {name}{sig}" if kind else f"{name} = {obj!r}"
    return [f"### `{name}`", "", "```python", head, "```", "", _markdown(doc or ""), ""]


def api_entries() -> dict[str, dict[str, object]]:
    """{section: {name: object}} in page order: the modules of API, then the spec classes by defining module."""
    sections: dict[str, dict[str, object]] = {}
    for modname, names in API:
        module = importlib.import_module(modname)
        sections[modname] = {n: functools.reduce(getattr, n.split("."), module) for n in (names or _public(module))}
    spec = importlib.import_module(SPEC_CLASSES)
    for n in [*spec.__all__, *sorted(spec.families.exported())]:
        obj = getattr(spec, n)
        if inspect.isclass(obj) and not issubclass(obj, Exception):
            sections.setdefault(f"spec classes: {obj.__module__}", {})[n] = obj
    return sections


def api_reference() -> str:
    out = ["# API reference", "",
           "Generated from the docstrings at each build (`tools/docs_reference.py`). `import vspec` gives the spec "
           "language (torch-free) and, imported when first used, the functions that build, profile, load and "
           "train; the spec classes follow, grouped by the module (the core's, then each family's) that defines "
           "them.", ""]
    for section, entries in api_entries().items():
        out += [f"## {section}", ""]
        module = sys.modules.get(section)
        if module is not None and module.__doc__:
            out += [inspect.cleandoc(module.__doc__), ""]
        for name, obj in entries.items():
            out += _entry(name, obj)
    return "\n".join(out)


def pygments_css() -> str:
    """The code blocks' colours: Pygments' default style for codehilite's classes (highlighting happens at build
    time, so the site loads no script for it)."""
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(style="default").get_style_defs(".codehilite")


def on_files(files, config):
    """mkdocs hook: add the two generated pages and the highlighting stylesheet to the site."""
    from mkdocs.structure.files import File

    for uri, text in (("reference/cli.md", cli_reference()), ("reference/api.md", api_reference()),
                      ("css/pygments.css", pygments_css())):
        files.append(File.generated(config, uri, content=text))
    return files


def on_post_build(config):
    """mkdocs hook: drop the theme's 404.html, whose links are root-absolute without a `site_url` (broken wherever
    the site is not served at a host's root, and when opened from the disk); a server shows its own 404."""
    from pathlib import Path

    (Path(config["site_dir"]) / "404.html").unlink(missing_ok=True)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what not in ("cli", "api"):
        sys.exit("usage: python tools/docs_reference.py cli|api")
    print(cli_reference() if what == "cli" else api_reference())
