"""What every vspec command line shares (`vspec`, tools/train.py, tools/eval.py): an error is one line.

`vspec/cli.py` and `vspec/train/cli.py` both import from here and neither imports the other."""

from __future__ import annotations

import argparse
import unicodedata
from typing import NoReturn

MAX_LINE = 500  # characters of an error line; a longer message is cut


class UsageError(Exception):
    """A bad command line."""


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage + error over several lines; vspec's commands report one line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message} (see --help)")


def one_line(e: BaseException, limit: int = MAX_LINE) -> str:
    """An exception as one line: its message with line breaks folded, cut to `limit` characters, what a
    terminal would act on escaped (`printable`); the type's name when the message is empty."""
    try:
        text = " ".join(str(e).split())
    except Exception:  # noqa: BLE001 - a message that cannot be rendered
        text = ""
    text = text or type(e).__name__
    return printable(text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit:,} more characters]")


def printable(text: str) -> str:
    """`text` safe to print: an undecodable byte of a file name (a lone surrogate, as Python decodes it) as
    \\xNN, control and format characters (ESC, BEL, line breaks, bidi overrides) as Python escapes them
    (\\x1b, \\n, \\u202e); everything else as it is."""
    if text.isprintable():
        return text
    out = []
    for c in text:
        if "\udc80" <= c <= "\udcff":
            out.append(f"\\x{ord(c) - 0xDC00:02x}")
        elif unicodedata.category(c) in ("Cc", "Cf", "Cs"):
            out.append(c.encode("unicode_escape").decode("ascii"))
        else:
            out.append(c)
    return "".join(out)
