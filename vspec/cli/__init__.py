"""The `vspec` command: one module per subcommand (build, profile, show, analyze, export, fit, compare, weights,
train, eval, label, data), each with its `NAME`, `HELP`, `add_parser(sub)` and `run(args)`; what they share
(one-line errors, argument types, output paths) is in `common.py`, the tables in `tables.py`, the training
configuration's flags (derived from its fields) in `fields.py`. `vspec train` and `vspec eval` are tools/train.py
and tools/eval.py (the same arguments, the same runs); they and `vspec label` (token-label maps) have their own
parsers, imported when used. Importing this package does not import torch.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from importlib import import_module

from .._moved import moved as _moved
from ..extras import missing_extra
from ..spec import SpecError
from ..version import __version__
from . import analyze, build, compare, data, export, fit, listing, profile, show, weights
from .common import (  # noqa: F401 - output_file, output_folder: re-exported
    OneLineParser,
    UsageError,
    one_line,
    one_line_warnings,
    output_file,
    output_folder,
)

__all__ = ["COMMANDS", "RUNS", "main", "parser"]

COMMANDS = {m.NAME: m for m in (build, profile, show, analyze, export, fit, compare, weights, listing, data)}
# the training commands: their own parsers (tools/train.py's and tools/eval.py's), imported when used
RUNS = {"train": ("vspec.cli.train", "train a spec (tools/train.py: the same arguments; vspec train --help)"),
        "eval": ("vspec.cli.eval", "evaluate a checkpoint or a model folder (tools/eval.py: the same arguments)"),
        "label": ("vspec.cli.label", "write token-label maps of a data set's training images with a model")}


def parser() -> OneLineParser:
    """The `vspec` argument parser: one subcommand per entry of COMMANDS, and RUNS' commands (train, eval,
    label) named for --help only: `main` hands their arguments to their own parsers."""
    top = OneLineParser(prog="vspec", description="Transformer specs, for vision and language: validate, build, "
                                                  "profile, show, analyze, export, fit to a budget, compare, "
                                                  "train, evaluate, label tokens, pack data sets; "
                                                  "the presets (vspec list), published weights (vspec "
                                                  "weights).")
    top.add_argument("--version", action="version", version=f"vspec {__version__}")
    sub = top.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")
    for command in COMMANDS.values():
        command.add_parser(sub)
    for name, (_, help_) in RUNS.items():
        sub.add_parser(name, help=help_, add_help=False)
    return top


@contextlib.contextmanager
def _tolerant_stdout():
    """While the command runs, a character the stdout's encoding lacks (an ASCII PYTHONIOENCODING and an
    accented file name) is printed as a backslash escape instead of raising UnicodeEncodeError."""
    stdout = sys.stdout
    errors = getattr(stdout, "errors", None)
    if errors != "strict" or not hasattr(stdout, "reconfigure"):
        yield
        return
    stdout.reconfigure(errors="backslashreplace")
    try:
        yield
    finally:
        stdout.reconfigure(errors=errors)


def main(argv: Sequence[str] | None = None) -> int:
    """The `vspec` command: parse `argv`, run the command, answer an error in one line.

    Args:
        argv: the arguments after the program's name (default: sys.argv[1:]).

    Returns:
        the exit status: 0, 2 for an error a user can cause (printed as `vspec: error: ...`), 130 if interrupted,
        141 when the reader of the output went away; RUNS' commands return their own."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in RUNS:  # tools/train.py's and tools/eval.py's command lines, exit codes included
        return import_module(RUNS[argv[0]][0]).main(argv[1:], prog=f"vspec {argv[0]}")
    with _tolerant_stdout(), one_line_warnings("vspec"):
        try:
            args = parser().parse_args(argv)
            COMMANDS[args.command].run(args)
            sys.stdout.flush()  # here, so that a reader that went away is answered below
        except BrokenPipeError:  # `vspec show spec.py | head -1`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            return 141  # 128 + SIGPIPE, as a command the signal ended
        except UsageError as e:
            print(one_line(e), file=sys.stderr)
            return 2
        except (SpecError, OSError, MemoryError) as e:
            print(f"vspec: error: {one_line(e)}", file=sys.stderr)
            return 2
        except ImportError as e:  # a module of an extra that is not installed: which extra, in one line
            if (line := missing_extra(e)) is None:
                raise
            print(f"vspec {argv[0] if argv else ''}: error: {line}".replace("  ", " "), file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("vspec: interrupted", file=sys.stderr)
            return 130
    return 0


def __getattr__(name: str):  # the previous release's names (vspec/_moved.py)
    return _moved(__name__, name)
