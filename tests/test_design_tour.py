"""docs/design.md's tour names files and definitions as `path:name`; each must exist, or the tour has gone stale."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REF = re.compile(r"`(vspec/[\w/]+\.py)(?::([\w.]+))?`")


def _tour() -> str:
    text = (ROOT / "docs" / "design.md").read_text()
    start = text.index("\n## A tour\n")
    return text[start:text.index("\n## ", start + 1)]


def _defined(tree: ast.Module, qualname: str) -> bool:
    """Whether `qualname` (a top-level function / class, or Class.method) is defined in `tree`."""
    scope: list[ast.stmt] = tree.body
    for part in qualname.split("."):
        found = [n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 and n.name == part]
        if not found:
            return False
        scope = found[0].body
    return True


def test_the_tour_names_what_exists():
    refs = REF.findall(_tour())
    assert len(refs) >= 40  # the reading order and both flows
    stale = []
    for path, name in refs:
        file = ROOT / path
        if not file.is_file():
            stale.append(path)
        elif name and not _defined(ast.parse(file.read_text()), name):
            stale.append(f"{path}:{name}")
    assert not stale, f"docs/design.md's tour names what is not there: {stale}"


def test_the_check_sees_a_stale_name():
    tree = ast.parse("class A:\n    def f(self): pass\ndef g(): pass\n")
    assert _defined(tree, "A.f") and _defined(tree, "g")
    assert not _defined(tree, "A.h") and not _defined(tree, "h") and not _defined(tree, "g.x")
