"""The examples of README.md and docs/: each ```python block and each ```console block, in page order, and how one
runs. A page's blocks run in one fresh folder (with specs/, tools/ and benchmarks/ linked in) and share one Python
namespace, as a reader who types them in order would. In a console block each `$ COMMAND` (a trailing backslash
continues it) is run and the lines after it, up to the next `$`, are what it must print (stdout and stderr): a
line `...` stands for any lines, `...` inside a line for any text. `$ cat FILE` followed by lines writes FILE
with them (the page shows a file the next commands read). A block that cannot run here is marked on the line
above it with `<!-- not run: REASON -->` (network, GPU, several machines, the suite itself); the marks are
counted. Blocks of other languages (text, toml, json) are not examples."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import ROOT

RUN = ("python", "console")
NOT_RUN = re.compile(r"^<!-- not run: (.+?) -->$")
LINKED = ("specs", "tools", "benchmarks")  # what a page's folder links to, so that relative paths work


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    not_run: str | None  # the reason, when marked


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one page (every language), with the not-run mark of the line above each."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        above = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        mark = NOT_RUN.match(above)
        found.append(Block(str(path.relative_to(ROOT)), i + 1, m.group(1), "\n".join(lines[i + 1:end]) + "\n",
                           mark.group(1) if mark else None))
        i = end + 1
    return found


def commands(block: Block) -> list[tuple[str, list[str]]]:
    """A console block's (command, the lines it must print) pairs."""
    out: list[tuple[str, list[str]]] = []
    lines = block.text.rstrip("\n").splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise ValueError(f"{block.page}:{block.line}: output before any command: {lines[i]!r}")
        command = lines[i][2:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        i += 1
        expected = []
        while i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        out.append((command, expected))
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """`expected` with its ellipses (a line `...`: any lines; `...` in a line: any text) covers `actual`."""
    if not expected:
        return not actual
    head = expected[0].rstrip()
    if head == "...":
        return any(matches(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    if not actual:
        return False
    pattern = ".*".join(re.escape(part) for part in head.split("..."))
    return re.fullmatch(pattern, actual[0].rstrip()) is not None and matches(expected[1:], actual[1:])


def run_command(command: str, expected: list[str], folder: Path) -> tuple[int, str]:
    """Run one console command in-process (vspec, python tools/train.py / eval.py, cat): its exit
    code and what it printed."""
    argv = shlex.split(command, comments=True)
    if argv[0] == "cat" and len(argv) == 2:
        (folder / argv[1]).write_text("\n".join(expected) + "\n")
        return 0, "\n".join(expected)
    if argv[0] == "vspec":
        from vspec.cli import main

        call = lambda: main(argv[1:])  # noqa: E731
    elif argv[0] == "python" and len(argv) > 1 and argv[1] in ("tools/train.py", "tools/eval.py"):
        from vspec.cli import main

        call = lambda: main([Path(argv[1]).stem, *argv[2:]])  # noqa: E731
    else:
        raise ValueError(f"no way to run {argv[0]!r} here: mark the block `<!-- not run: REASON -->`")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        try:
            code = call()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return code or 0, buffer.getvalue()


@contextlib.contextmanager
def page_folder(folder: Path):
    """cwd = a fresh folder with the repository's specs/, tools/ and benchmarks/ linked in."""
    for name in LINKED:
        (folder / name).symlink_to(ROOT / name, target_is_directory=True)
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield folder
    finally:
        os.chdir(before)


def doc(name: str) -> str:
    """The text of docs/NAME.md (the page a test holds to the measurement)."""
    return (ROOT / "docs" / f"{name}.md").read_text()


def every_page() -> str:
    """README.md and every page of docs/, one after another."""
    return "\n".join(p.read_text() for p in pages())
