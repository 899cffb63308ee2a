"""The package's imports point one way (issue 45, item 1): no circle among vspec's modules, counting the imports
inside functions too (a function-local import hides a circle from Python, not from this walk), and nothing outside
tests/ imports tests/. Imports under `if TYPE_CHECKING:` are annotations only and never run: they are not counted.
The walk reads the sources (ast), so it sees every branch, not just the ones a run takes."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vspec"


def _module(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith("TYPE_CHECKING")


def imports(tree: ast.AST):
    """Every import statement of a module, at any depth, except those under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(child for child in ast.iter_child_nodes(node) if not _type_checking(child))


def graph(root: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """{module: {imported vspec module: line}}: `from a import b` counts as an import of `a.b` where that is a
    module, else of `a`."""
    files = {_module(p, root): p for p in sorted(root.rglob("*.py"))}

    def known(name: str) -> str:
        while name not in files and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    edges: dict[str, dict[str, int]] = {}
    for name, path in files.items():
        out = edges.setdefault(name, {})
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = ".".join(package[: len(package) - node.level + 1] + [node.module or ""] if node.level
                                else [node.module or ""]).strip(".")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                if target.split(".")[0] == root.name and known(target) != name:
                    out.setdefault(known(target), node.lineno)
    return edges


def cycle(edges: dict[str, dict[str, int]]) -> list[str] | None:
    """One circle of imports (its modules in order, the first again at the end), or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in edges.get(node, {}):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_the_walk_finds_a_circle_hidden_in_a_function(tmp_path):
    """The check can fail: a package whose circle is closed by a function-local import, one under TYPE_CHECKING
    that closes none."""
    pkg = tmp_path / "vspec"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import a\n")
    assert cycle(graph(pkg)) is None
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    assert cycle(graph(pkg)) == ["vspec.a", "vspec.sub.b", "vspec.a"]


def test_the_package_has_no_import_circle():
    edges = graph()
    assert len(edges) > 100  # the whole package was read
    found = cycle(edges)
    assert found is None, "import circle: " + " -> ".join(
        f"{m} (line {edges[m][n]})" for m, n in zip(found, found[1:], strict=False))


def test_nothing_outside_tests_imports_tests():
    offenders = []
    for folder in ("vspec", "tools", "benchmarks", "specs", "docs"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in imports(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if any(n == "tests" or n.startswith("tests.") for n in names):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []



REASONS = ("torch", "extra", "platform")  # what keeps an import inside a function: the comment's first word


def local_imports(path: Path):
    """(statement, the comment on its last line) of every import inside a function of the module."""
    lines = path.read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in imports(func):
                yield node, lines[node.end_lineno - 1].partition("#")[2].strip()


def imports_torch(path: Path) -> bool:
    """Whether importing the module imports torch: its own top-level imports name torch or a vspec module that
    does (followed through the package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    return any((a.name if isinstance(n, ast.Import) else n.module or "").split(".")[0] == "torch"
               for n in top for a in n.names)


def test_an_import_inside_a_function_says_why():
    """A function-local import keeps torch (or an extra, or a module one platform lacks) out of importing its
    module, and says which in one word; "torch" where the module imports torch at the top anyway is no reason."""
    edges, files = graph(), {_module(p, PACKAGE): p for p in PACKAGE.rglob("*.py")}
    heavy = {name for name, path in files.items() if imports_torch(path)}
    changed = True
    while changed:  # a module that imports (at the top) one that imports torch imports torch
        changed = False
        for name, path in files.items():
            tree = ast.parse(path.read_text(encoding="utf-8"))
            top = {n.lineno for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)}
            if name not in heavy and any(t in heavy and line in top for t, line in edges[name].items()):
                heavy.add(name)
                changed = True
    wrong = []
    for name, path in sorted(files.items()):
        for node, comment in local_imports(path):
            reason = comment.split(":")[0].split()[0] if comment else ""
            if reason not in REASONS or (reason == "torch" and name in heavy):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)!r} # {comment}")
    assert wrong == []


def test_no_test_module_imports_another():
    """Tests share through tests/helpers/ (and conftest.py's fixtures), never by importing a test module."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in imports(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""]
            if any(part.startswith(("test_", "conftest")) for n in names for part in n.split(".")):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_the_tests_are_laid_out_like_the_package():
    """tests/<subpackage>/ for each subpackage of vspec/ that has tests, tests/models/<family>/ for each family;
    no module edits the import path (the benchmarks are a package: `python -m benchmarks.<name>`)."""
    for family in sorted(p.name for p in (PACKAGE / "models").iterdir() if (p / "spec.py").exists()):
        assert list((ROOT / "tests" / "models" / family).glob("test_*.py")), family
    for folder in sorted(p for p in (ROOT / "tests").iterdir() if p.is_dir() and list(p.glob("test_*.py"))):
        assert (PACKAGE / folder.name).is_dir(), folder.name
    needle = "sys." + "path"  # (spelled apart: this file is no offender)
    editing = sorted(str(p.relative_to(ROOT)) for folder in ("vspec", "tests", "tools", "benchmarks", "specs")
                     for p in (ROOT / folder).rglob("*.py") if needle in p.read_text(encoding="utf-8"))
    assert editing == [], editing


# The layer order (docs/design.md, Layout), lowest first: a module imports its own layer's and lower ones. A paper
# (vspec/models/) stands on the core and is run by the machinery above it (the profiler, training, the commands); the
# core finds the families by name (vspec.spec.families), never by an import. `_moved`, `extras` and `version` serve
# every layer; any module not named here is above the papers.
LAYERS = {"vspec.spec": 0, "vspec.ops": 1, "vspec.nn": 2, "vspec.compiler": 3, "vspec.convert": 4,
          "vspec.analysis": 4, "vspec.models": 5}
EVERYWHERE = ("vspec._moved", "vspec.extras", "vspec.version")
ABOVE = max(LAYERS.values()) + 1


def layer(module: str) -> int | None:
    """A module's layer (None: it serves every layer)."""
    if module.startswith(EVERYWHERE):
        return None
    return next((n for prefix, n in LAYERS.items() if module == prefix or module.startswith(f"{prefix}.")), ABOVE)


def upward(edges: dict[str, dict[str, int]]) -> list[str]:
    """The imports that point up the layer order, as `module:line -> target`."""
    return [f"{m}:{line} -> {t}" for m, targets in sorted(edges.items()) for t, line in targets.items()
            if None not in (layer(m), layer(t)) and layer(t) > layer(m)]


def test_the_layer_check_finds_an_import_up(tmp_path):
    pkg = tmp_path / "vspec"
    for folder in ("spec", "nn", "models/toy", "train"):
        (pkg / folder).mkdir(parents=True)
    (pkg / "_moved.py").write_text("")
    (pkg / "spec" / "kinds.py").write_text("")
    (pkg / "train" / "recipes.py").write_text("")
    (pkg / "nn" / "layers.py").write_text("from ..spec import kinds\nfrom .. import _moved\n")
    (pkg / "models" / "toy" / "paper.py").write_text("from ...nn import layers\n")
    assert upward(graph(pkg)) == []
    (pkg / "models" / "toy" / "paper.py").write_text("def f():\n    from ...train import recipes\n")
    (pkg / "spec" / "kinds.py").write_text("import vspec.models.toy.paper\n")
    assert upward(graph(pkg)) == [
        "vspec.models.toy.paper:2 -> vspec.train.recipes", "vspec.spec.kinds:1 -> vspec.models.toy.paper"]


def test_no_paper_imports_the_machinery_that_runs_it():
    """A family imports the core and the declarations of the spec layer (`vspec.spec.paper`), never the training
    room or the profiler (issue 62)."""
    edges = graph()
    assert [e for e in upward(edges) if e.startswith("vspec.models.")] == []


def test_the_core_imports_no_family_and_points_down():
    edges = graph()
    assert [e for e in upward(edges) if not e.startswith("vspec.models.")] == []
