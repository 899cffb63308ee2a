"""What every command line of vspec shares (`vspec` and its subcommands, tools/train.py, tools/eval.py): one-line
errors, the argument types, spec loading and the checks of output paths.

Every error is one line on stderr (cut to MAX_LINE characters) and exit code 2. Whatever a command prints from its
input (paths, keys, messages) goes through `printable`: an undecodable byte of a file name or a terminal escape
reaches neither the terminal nor a strict UTF-8 stream raw. Every output path goes through `output_file` /
`output_folder`: only a new path or a regular file (a folder) is written. Importing this module does not import
torch.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import NoReturn

from .._moved import moved as _moved
from ..spec import Model, SpecError, load_spec, override, parse_assignment
from ..spec.errors import FILE_KINDS, MAX_LINE, file_kind, one_line, printable, show  # noqa: F401 - re-exported
from ..train.validators import ConfigError, rule

__all__ = ["OneLineParser", "UsageError", "check_fit", "field_type", "int_in", "load", "memory_flag",
           "nonnegative_float", "one_line_warnings", "output_file", "output_folder", "positive", "positive_float",
           "pretrained_flag", "spec_args"]


class UsageError(Exception):
    """A bad command line."""


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage + error over several lines; vspec's commands report one line."""

    def error(self, message: str) -> NoReturn:
        """Raise the parser's error as one line (`UsageError`) instead of printing usage and exiting.

        Args:
            message: argparse's message."""
        raise UsageError(f"{self.prog}: error: {message} (see --help)")


# ---------------------------------------------------------------- argument types
def int_in(low: int, high: int | None = None, label: str | None = None):
    """An argparse type: an int (ASCII digits) in [low, high] (high None: no bound but the memory guard's).

    Args:
        low: the smallest value taken.
        high: the largest, or None.
        label: how the message names `high` (default: its value)."""

    def parse(text: str) -> int:
        try:
            if not text.isascii() or "_" in text:  # int() takes other scripts' digits ('١٢') and '1_0'
                raise ValueError(text)
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {show(text)}") from None
        if value < low or high is not None and value > high:
            rule = f">= {low}" if high is None else f"in [{low}, {label or high}]"
            raise argparse.ArgumentTypeError(f"must be {rule}, got {show(value)}")
        return value

    parse.__name__ = "int"  # argparse names the type in its own messages
    return parse


positive = int_in(1)


def field_type(cls: type, name: str):
    """An argparse type: a number (ASCII digits) that the training configuration's field `name` of `cls` takes,
    checked by that field's own validator (vspec/train/validators.py), so the flag and the Python API agree.

    Args:
        cls: the configuration class (TrainConfig's parts: DataConfig, RunConfig, Recipe).
        name: the field's name."""
    check = rule(cls, name)

    def parse(text: str):
        try:
            if not text.isascii() or "_" in text:  # int() and float() take other scripts' digits and '1_0'
                raise ValueError(text)
            value = check.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {check.kind.__name__} value: {show(text)}") from None
        try:
            check.check(name, value)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(e.message) from None
        return value

    parse.__name__ = check.kind.__name__  # argparse names the type in its own messages
    return parse


def _finite_float(text: str, zero: bool) -> float:
    try:
        if not text.isascii() or "_" in text:  # float() takes other scripts' digits and '1_0'
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {show(text)}") from None
    if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
        raise argparse.ArgumentTypeError(f"must be finite and {'>=' if zero else '>'} 0, got {show(text)}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite float > 0 (ASCII digits).

    Args:
        text: the flag's value."""
    return _finite_float(text, zero=False)


def nonnegative_float(text: str) -> float:
    """An argparse type: a finite float >= 0 (ASCII digits), e.g. a relative tolerance.

    Args:
        text: the flag's value."""
    return _finite_float(text, zero=True)


def spec_args(p: argparse.ArgumentParser) -> None:
    """Add the spec's arguments every spec command takes: PATH (a spec file or a preset) and --set.

    Args:
        p: the command's parser."""
    p.add_argument("path", metavar="PATH", help="spec file: .py (defines SPEC), .json or .toml; or a preset's name "
                                                "(deit_tiny: specs/deit_tiny.py, as vspec.create_model takes it)")
    p.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                   help="dotted override, repeatable, e.g. --set block.attention.heads=6 --set head.kind=gap; "
                        "values are JSON (6, 0.1, true, null, [32, 32]) or bare strings")


def memory_flag(p: argparse.ArgumentParser, what: str) -> None:
    """Add --no-memory-check (dest `memory_check`), which skips the size guard (`check_fit`).

    Args:
        p: the command's parser.
        what: what the guard refuses by default, ending the flag's help."""
    p.add_argument("--no-memory-check", dest="memory_check", action="store_false",
                   help=f"skip the size guard: by default {what}")


def _weights_tag(text: str) -> str:
    """An argparse type: a weights tag of `--pretrained TAG` (not empty: an empty tag is no request for the default)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty tag; give --pretrained alone for the default weights, or a tag "
                                         "(`vspec weights` lists them)")
    return text


def pretrained_flag(p: argparse.ArgumentParser, what: str = "start from") -> None:
    """Add --pretrained [TAG]: False when absent, True alone (the default tag), else the tag.

    Args:
        p: the command's parser.
        what: the verb the help begins with ("start from" adds that a head's missing or reshaped parts start
            fresh)."""
    p.add_argument("--pretrained", nargs="?", const=True, default=False, metavar="TAG", type=_weights_tag,
                   help=f"{what} the preset's published weights (its default tag, or TAG; `vspec weights` lists "
                        "them), fetched into Hugging Face's or torch hub's cache and converted once into vspec's"
                        + ("" if what != "start from" else "; the head's parts the checkpoint lacks or that differ "
                                                           "in shape start fresh"))


def load(args: argparse.Namespace) -> Model:
    """The spec of `args.path` (a file, or a preset's name), with `args.overrides` applied.

    Args:
        args: the parsed command line (`spec_args`' path and overrides)."""
    spec = load_spec(args.path)
    return override(spec, dict(parse_assignment(a) for a in args.overrides)) if args.overrides else spec


def check_fit(spec: Model, batch: int, what: str) -> None:
    """`vspec.compiler.check_fit`, imported when used (torch is not imported for --help).

    Args:
        spec: the model's spec.
        batch: the batch size the command runs.
        what: what the refusal says the command was about to do."""
    from ..compiler import check_fit as fit  # torch

    fit(spec, batch, what)


# ---------------------------------------------------------------- output paths
def _kind(path: Path) -> str | None:
    """None for a new path (nothing there, not even a dangling link), else what is there: "a regular file",
    "a folder", "a named pipe (FIFO)", ... (following symbolic links); a link that leads nowhere or in a
    circle is a SpecError."""
    try:
        mode = os.stat(path).st_mode
    except NotADirectoryError:  # a file above it: `_parents` names it
        return None
    except FileNotFoundError:
        if os.path.islink(path):
            raise SpecError("", f"{path}: a symbolic link to {os.readlink(path)}, which does not exist") from None
        return None
    except OSError as e:  # a symlink loop, a name too long, no permission
        raise SpecError("", f"{path}: {e.strerror or one_line(e)}") from None
    return file_kind(mode)


def _parents(flag: str, path: Path) -> None:
    blocking = next((p for p in path.parents if _kind(p) not in (None, "a folder")), None)
    if blocking is not None:
        raise SpecError("", f"{flag} {path}: {blocking} is {_kind(blocking)}, not a folder")


# the kernel's file systems: no file can be written there (an existing /proc file even opens for writing as root)
_PSEUDO_FILE_SYSTEMS = frozenset({"proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
                                 "configfs", "bpf", "pstore", "efivarfs", "fusectl", "binfmt_misc"})


def _file_system(path: Path) -> str | None:
    """The type of the file system that holds `path` (an existing one), by the longest mount point above it in
    /proc/self/mountinfo; None where that table cannot be read (not Linux)."""
    try:
        table = Path("/proc/self/mountinfo").read_text(errors="surrogateescape").splitlines()
    except OSError:
        return None
    where, best, kind = os.path.realpath(path), "", None
    for line in table:  # ID PARENT MAJOR:MINOR ROOT MOUNT-POINT OPTIONS [TAGS...] - TYPE SOURCE OPTIONS
        fields = line.split(" ")
        if "-" not in fields[6:] or len(fields) < 5:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # \040: a space
        inside = where == point or where.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # the last mount on a point hides the earlier ones
            best, kind = point, fields[fields.index("-", 6) + 1]
    return kind


def _writable(flag: str, path: Path, existing: Path, is_file: bool) -> None:
    """Refuse `path` unless it can be written: `existing` (the file itself, else the nearest folder that exists
    above or at it) must not be on the kernel's file systems, and must open for writing (a file: without
    truncating it) or take a new file (a probe, created and removed). Writes nothing."""
    kind = _file_system(existing)
    if kind in _PSEUDO_FILE_SYSTEMS:
        raise SpecError("", f"{flag} {path}: {existing} is on a {kind} file system (the kernel's), where no file can "
                            "be written; give a path elsewhere")
    try:
        if is_file:
            os.close(os.open(existing, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0)))
        else:
            fd, probe = tempfile.mkstemp(prefix=".vspec-probe-", dir=existing)
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        where = "cannot be written" if is_file else f"cannot write in {existing}"
        raise SpecError("", f"{flag} {path}: {where} ({e.strerror or one_line(e)})") from None


def _nearest_folder(path: Path) -> Path:
    """The nearest existing folder at or above `path` (`_parents` has refused a file above it)."""
    return next((p for p in (path, *path.parents) if _kind(p) == "a folder"), Path("."))


@contextlib.contextmanager
def _naming(flag: str):
    """A SpecError raised inside says which option it is about (once)."""
    try:
        yield
    except SpecError as e:
        raise SpecError("", e.message if e.message.startswith(flag) else f"{flag} {e.message}") from None


def output_file(flag: str, out: str | Path) -> Path:
    """Where an output file goes (`flag` names the option in the message): a new path or an existing regular
    file (overwritten), never a folder, a named pipe (writing to one blocks until a reader comes), a socket, a
    device or a dangling link, nor a path that cannot be written (on /proc or /sys, in a folder that takes no new
    file, a file that does not open for writing: `_writable`); refused before any work is done. Missing folders
    above it are created when it is written.

    Args:
        flag: the option, as the message names it.
        out: the path given."""
    text = str(out)
    path = Path(text)
    with _naming(flag):
        kind = "a folder" if not text or text.endswith(("/", "\\")) else _kind(path)
        if kind == "a folder":
            example = Path(text or ".") / "model.pt"
            raise SpecError("", f"{flag} {text!r}: is a folder; give a file name, e.g. {example}")
        if kind not in (None, "a regular file"):
            raise SpecError("", f"{flag} {path}: is {kind}, not a regular file; give a new path or a file to overwrite")
        _parents(flag, path)
        _writable(flag, path, path if kind else _nearest_folder(path.parent), is_file=bool(kind))
    return path


def output_folder(flag: str, out: str | Path) -> Path:
    """A folder to write into: an existing folder or a new path (created when written) whose nearest existing
    folder takes a new file and is not on /proc or /sys (`_writable`), nothing else; not an empty path (Path("")
    is the working folder: "." says so).

    Args:
        flag: the option, as the message names it.
        out: the path given."""
    if not str(out):
        raise SpecError("", f"{flag} '': an empty path; give a folder ('.' for the working folder)")
    path = Path(out)
    with _naming(flag):
        kind = _kind(path)
        if kind not in (None, "a folder"):
            raise SpecError("", f"{flag} {path}: is {kind}, not a folder")
        _parents(flag, path)
        _writable(flag, path, _nearest_folder(path), is_file=False)
    return path


# ---------------------------------------------------------------- warnings
@contextlib.contextmanager
def one_line_warnings(prog: str):
    """While a command runs, a warning (a cache refused and made anew, a converter's note) prints as one line on
    stderr, `PROG: warning: message`, not as Python's file:line and source line.

    Args:
        prog: the command's name, first on each line."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"{prog}: warning: {one_line(message)}", file=file or sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def __getattr__(name: str):  # is_checkpoint and spec_file went to vspec.spec.catalogue (vspec/_moved.py)
    return _moved(__name__, name)
