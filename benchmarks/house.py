"""The house's surface in figures (issue 62): what a reader of the package meets, counted from its source with `ast`
(nothing imported or run), so that a change to the house can say its before and after.

    python -m benchmarks.house [--root vspec] [--long 60] [--list]

Counts, over the package's modules:
  - modules, and those with `__all__`;
  - public top-level definitions (functions and classes not starting with `_`), and public assigned names
    (re-exports by `import` excluded);
  - the public definitions without a docstring (top-level; and the public methods of public classes), and the
    docstrings holding an `Args:` block;
  - the public functions (top-level, named in `__all__`, or not starting with `_` where a module has none) taking
    parameters whose docstring has no `Args:` block;
  - functions and methods longer than --long lines (their `def` to their last line), each named with --list, and
    those whose docstring does not say why ("long because");
  - the public modules without `__all__`, and the public top-level definitions a module's `__all__` leaves out.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _public(name: str) -> bool:
    return not name.startswith("_")


def _assigned(node: ast.stmt) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
        node, ast.AnnAssign) else []
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _functions(tree: ast.AST, where: str):
    """Every function or method of a module: (its qualified place, node)."""
    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{prefix}{child.name}", child
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
    yield from walk(tree, f"{where}:")


def _listed(tree: ast.Module) -> set[str] | None:
    """The names a module's `__all__` lists (a literal list or tuple of strings), None where it has none."""
    for node in tree.body:
        if "__all__" in _assigned(node) and isinstance(node.value, (ast.List, ast.Tuple)):
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return None


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """A function's parameters, less self / cls."""
    a = node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + [p.arg for p in (a.vararg, a.kwarg) if p]
    return [n for n in names if n not in ("self", "cls")]


def figures(package: Path, long: int = 60) -> dict:
    """The counts above for the modules under `package`."""
    out = {"modules": 0, "with_all": 0, "public_defs": 0, "public_assigned": 0, "undocumented": [],
           "undocumented_methods": [], "args_blocks": 0, "no_args": [], "long": [], "long_unexplained": [],
           "without_all": [], "unlisted": []}
    for path in sorted(package.rglob("*.py")):
        where = str(path.relative_to(package.parent))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        out["modules"] += 1
        assigned = {name for node in tree.body for name in _assigned(node)}
        out["with_all"] += "__all__" in assigned
        listed = _listed(tree)
        if listed is None and not path.name.startswith("_"):
            out["without_all"].append(where)
        out["public_assigned"] += sum(map(_public, assigned - {"__all__"}))
        defined = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                   and _public(n.name)]
        out["public_defs"] += len(defined)
        methods = [(f"{c.name}.{m.name}", m) for c in defined if isinstance(c, ast.ClassDef) for m in c.body
                   if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(m.name)]
        for key, (name, node) in [("undocumented", (n.name, n)) for n in defined] + [
                ("undocumented_methods", m) for m in methods]:
            doc = ast.get_docstring(node)
            if doc is None:
                out[key].append(f"{where}:{name}")
            elif "Args:" in doc:
                out["args_blocks"] += 1
        out["unlisted"] += [f"{where}:{n.name}" for n in defined if listed is not None and n.name not in listed]
        for node in defined:
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (listed is None or node.name in listed)
                    and _parameters(node) and "Args:" not in (ast.get_docstring(node) or "")):
                out["no_args"].append(f"{where}:{node.name}")
        for name, node in _functions(tree, where):
            if node.end_lineno - node.lineno + 1 > long:
                out["long"].append((name, node.end_lineno - node.lineno + 1))
                if "long because" not in (ast.get_docstring(node) or "").lower():
                    out["long_unexplained"].append(name)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=str(ROOT / "vspec"), help="the package's folder")
    ap.add_argument("--long", type=int, default=60, help="a function longer than this many lines is counted")
    ap.add_argument("--list", action="store_true", help="name each long function and undocumented definition")
    args = ap.parse_args(argv)
    f = figures(Path(args.root), args.long)
    print(f"modules: {f['modules']}, with __all__: {f['with_all']}; public top-level functions and classes: "
          f"{f['public_defs']} (and {f['public_assigned']} public assigned names), {len(f['undocumented'])} without a "
          f"docstring (public methods without one: {len(f['undocumented_methods'])}); docstrings with Args: "
          f"{f['args_blocks']}, public functions with parameters and no Args: {len(f['no_args'])}; functions over "
          f"{args.long} lines: {len(f['long'])} ({len(f['long_unexplained'])} without a reason in the docstring)")
    if args.list:
        for name, n in sorted(f["long"], key=lambda x: -x[1]):
            print(f"  {n:4d} lines  {name}")
        for name in f["undocumented"] + f["undocumented_methods"]:
            print(f"  no docstring  {name}")
        for name in f["no_args"]:
            print(f"  no Args:      {name}")
        for name in f["without_all"]:
            print(f"  no __all__    {name}")
        for name in f["unlisted"]:
            print(f"  not in __all__ {name}")
    return f


if __name__ == "__main__":
    main()
