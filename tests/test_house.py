"""The house's rules that a reader checks by eye, checked here (issue 56): files short enough to read in one sitting
and docs/design.md's file table naming every module (the import graph's rules: tests/test_imports.py)."""

import ast
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vspec"
MAX_LINES = 500


def test_no_file_of_the_package_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def _rows(text: str) -> dict[str, str]:
    """docs/design.md's file table: {the path a row is about: its text}."""
    return {m[1]: m[2] for m in re.finditer(r"^\| `([^`]+)` \| (.*) \|$", text, re.M)}


def named(row: str, below: str) -> bool:
    """Whether a folder's row names a module by its path below the folder, or by its file name beside its own
    folder's name (`text/` ... `batches.py`)."""
    parent, _, name = below.rpartition("/")
    return f"`{below}`" in row or (f"`{name}`" in row and (not parent or f"`{parent}/`" in row))


def unnamed(rows: dict[str, str], modules: list[str]) -> list[str]:
    """The modules (paths under the package's parent) that no row names: a row about the module itself, or the row
    of its nearest folder naming it by its path below that folder (`data/loader.py`, or `loader.py` directly in the
    folder). Every family folder's modules are read against the row of `vspec/models/`."""
    missing = []
    for module in modules:
        if module in rows:
            continue
        path = re.sub(r"^vspec/models/[^/]+/", "vspec/models/", module)
        folders = [f for f in rows if f.endswith("/") and path.startswith(f)]
        folder = max(folders, key=len, default=None)
        below = path[len(folder):] if folder else None
        if below is None or not named(rows[folder], below):
            missing.append(module)
    return missing


def test_the_check_finds_a_module_the_table_does_not_name():
    rows = {"vspec/a.py": "x", "vspec/sub/": "`b.py` and `data/c.py`; `text/`: `e.py`", "vspec/models/": "`spec.py`"}
    modules = ["vspec/a.py", "vspec/sub/b.py", "vspec/sub/data/c.py", "vspec/sub/text/e.py", "vspec/models/sot/spec.py"]
    assert unnamed(rows, modules) == []
    assert unnamed(rows, [*modules, "vspec/sub/d.py", "vspec/sub/data/b.py", "vspec/sub/data/e.py", "vspec/z.py"]) == [
        "vspec/sub/d.py", "vspec/sub/data/b.py", "vspec/sub/data/e.py", "vspec/z.py"]


def test_design_md_names_every_module():
    rows = _rows((ROOT / "docs/design.md").read_text(encoding="utf-8"))
    modules = [str(p.relative_to(ROOT)) for p in sorted(PACKAGE.rglob("*.py")) if p.name != "__init__.py"]
    assert len(modules) > 100
    assert unnamed(rows, modules) == []


def test_the_house_figures_count_what_a_reader_meets(tmp_path):
    """benchmarks/house.py (issue 62's before / after) on a package written here."""
    from benchmarks.house import figures

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('__all__ = ["f"]\nfrom os import path\nX = 1\n_Y = 2\n')
    body = "\n".join(f"    a{i} = {i}" for i in range(61))
    (pkg / "m.py").write_text(f'def f():\n    """Doc.\n\n    Args:\n        none\n    """\n\n\ndef g():\n{body}\n\n\n'
                              'class C:\n    """Doc."""\n\n    def run(self):\n        pass\n\n    def _h(self):\n'
                              '        pass\n\n\ndef _private():\n    pass\n\n\ndef h(x, *, y=1):\n    """Doc."""\n\n\n'
                              'def k(self):\n    """Long because it is.\n\n    Args:\n        self: no.\n    """\n'
                              + "\n".join(f"    b{i} = {i}" for i in range(61)) + "\n")
    f = figures(pkg)
    assert (f["modules"], f["with_all"], f["public_defs"], f["public_assigned"]) == (2, 1, 5, 1)
    assert f["undocumented"] == ["pkg/m.py:g"] and f["undocumented_methods"] == ["pkg/m.py:C.run"]
    assert f["args_blocks"] == 2 and f["long"] == [("pkg/m.py:g", 62), ("pkg/m.py:k", 67)]
    assert f["no_args"] == ["pkg/m.py:h"] and f["long_unexplained"] == ["pkg/m.py:g"]
    assert f["without_all"] == ["pkg/m.py"] and f["unlisted"] == []
    (pkg / "__init__.py").write_text('__all__ = ["f"]\n\n\ndef f():\n    """Doc."""\n\n\nclass D:\n    """Doc."""\n')
    assert figures(pkg)["unlisted"] == ["pkg/__init__.py:D"]


# a family's spec.py: its `__all__` is the kinds `vspec.spec` serves (vspec.spec.families), not all it defines
FAMILY_SPECS = "vspec/models/*/spec.py"


def test_the_surface_is_declared_and_documented():
    """Issue 62's surface: every public module declares `__all__` and lists in it every public top-level function
    and class it defines (a family's spec.py aside: FAMILY_SPECS); every public definition (methods of public
    classes too) has a docstring, every public function taking parameters an `Args:` block, and a function over
    60 lines says in its docstring why it is long. `python -m benchmarks.house --list` names what breaks a rule."""
    from benchmarks.house import figures

    f = figures(PACKAGE)
    assert f["modules"] > 150
    assert f["without_all"] == []
    assert [name for name in f["unlisted"] if not Path(name.split(":")[0]).match(FAMILY_SPECS)] == []
    assert f["undocumented"] == [] and f["undocumented_methods"] == []
    assert f["no_args"] == []
    assert f["long_unexplained"] == []


CORE = ("spec", "nn", "ops", "convert", "compiler.py", "profiler.py")  # docs/design.md, Layout: the core


def _core_files() -> list[Path]:
    return sorted(p for name in CORE for p in ([PACKAGE / name] if name.endswith(".py") else
                                              (PACKAGE / name).rglob("*.py")))


def _top_level(path: Path) -> list:
    return ast.parse(path.read_text(encoding="utf-8")).body


def test_the_core_names_no_family():
    """docs/design.md: "the core names no family" (issue 62). No class of the core carries a family's name or a
    family's class name; every role the core declares has a kind of the core (a role only a family fills is the
    family's: SoT's pool and representation norm); no constant of the core holds a state key a family's kind
    writes (Refiner's maps: the kinds declare it, `AttentionKind.maps_key`)."""
    from vspec.spec import KINDS, ROLES, kinds

    family_files = sorted((PACKAGE / "models").glob("*/*.py"))
    families = {p.parent.name for p in family_files}
    theirs = {n.name for p in family_files for n in _top_level(p) if isinstance(n, ast.ClassDef)}
    ours = {f"{p.relative_to(ROOT)}: {n.name}" for p in _core_files() for n in _top_level(p)
            if isinstance(n, ast.ClassDef)}
    assert len(ours) > 50 and len(theirs) > 50
    assert [c for c in ours if c.partition(": ")[2] in theirs or any(f in c.lower().partition(": ")[2]
                                                                    for f in families)] == []
    core = [b for b in kinds.ROLE_BASES.values() if not b.__module__.startswith("vspec.models.")]
    assert len(core) >= 6
    assert [b.__name__ for b in core if all(k.__module__.startswith("vspec.models.") for k in ROLES[b.role])] == []
    keys = {k for c in KINDS.values() if c.__module__.startswith("vspec.models.")
            for k in (c.__dict__.get("writes") if isinstance(c.__dict__.get("writes"), tuple) else ())}
    assert {"maps", "conv"} <= keys
    named = [f"{p.relative_to(ROOT)}: {ast.unparse(n)}" for p in _core_files() for n in _top_level(p)
             if isinstance(n, ast.Assign | ast.AnnAssign) and isinstance(n.value, ast.Constant)
             and n.value.value in keys]
    assert named == []


def _classes(prefixes: tuple[str, ...], suffixes: tuple[str, ...]) -> list[type]:
    """The classes defined in the package's modules under `prefixes` (dotted) or named with one of `suffixes`."""
    import importlib

    names = [".".join(p.relative_to(ROOT).with_suffix("").parts) for p in sorted(PACKAGE.rglob("*.py"))
             if p.name != "__init__.py"]
    modules = [importlib.import_module(n) for n in names if n.startswith(prefixes) or n.endswith(suffixes)]
    return [c for m in modules for c in vars(m).values() if inspect.isclass(c) and c.__module__ == m.__name__]


def test_a_module_class_shares_a_name_only_with_the_spec_it_is_built_from():
    """docs/design.md ("Adding a kind"): a kind's module class carries its spec class's name, the model's excepted
    (`Model` -> `Transformer`); a module class named as a spec class is that class's module in the compiler's table,
    or a part its block or model builds from that class (its first argument, `spec`: `Stage`, DHVT's `HeadTokens`)."""
    import typing

    import attrs
    from torch import nn

    from vspec import compiler

    table = compiler.modules()
    assert len(table) > 30
    assert [f"{s.__name__} -> {m.__name__}" for s, m in table.items() if s.__name__ != m.__name__] == [
        "Model -> Transformer"]
    specs = {c.__name__: c for c in _classes(("vspec.spec.",), (".spec",)) if attrs.has(c)}
    modules = [c for c in _classes(("vspec.nn.",), (".modules",)) if issubclass(c, nn.Module)]
    shared = [m for m in modules if m.__name__ in specs]
    assert len(shared) > 30

    def built_from(module: type) -> type | None:
        first = [*inspect.signature(module.__init__).parameters][1:2]
        return typing.get_type_hints(module.__init__).get("spec") if first == ["spec"] else None

    built = [m for m in shared if table.get(specs[m.__name__]) is m or built_from(m) is specs[m.__name__]]
    assert [f"{m.__module__}.{m.__name__}" for m in shared if m not in built] == []
