"""What every spec class shares: the error type, field validators and the `kind` tag; and the one place a value or
an exception is shortened for a message (`cut`; `show`, `one_line`, `cause`).

Pure data: attrs and the standard library only (importing this must not import torch).
"""

from __future__ import annotations

import math
import re
import stat
import struct
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "FILE_KINDS", "MAX_LINE", "MAX_SIZE", "SpecError", "cause", "check", "check_eps", "check_pair", "check_size", "cut",
    "eps_problem", "file_kind", "join", "one_line", "pair", "printable", "show", "show_key", "text_of",
]
MAX_SIZE = 2**31 - 1  # the largest size (width, count, pixels) a spec may give or imply: torch's int32 kernels
_SHOWN = 80  # at most this many characters of a user's value are echoed in an error message


def show(value: Any) -> str:
    """`repr(value)`, cut to _SHOWN characters: a 1 MB value must not be echoed whole in an error line.

    Args:
        value: any value of the user's.
    """
    if isinstance(value, int) and value.bit_length() > 64:  # also past Python's int-to-text digit limit
        return f"an int of {value.bit_length()} bits"
    return cut(repr(value))


def show_key(key: Any) -> str:
    """A key as an error's field path gives it: as written when it is a printable string, else like a value
    (`show`: its repr, cut), so that a key holding terminal escapes or line breaks reaches no terminal raw.

    Args:
        key: a mapping's key, as the user wrote it.
    """
    return cut(key) if isinstance(key, str) and key.isprintable() else show(key)


def cut(text: str, limit: int = _SHOWN, mark: str = "length") -> str:
    """`text`, or where it has more than `limit` characters its start, the cut marked as the message needs it (the
    one place a message is shortened): "length" (`ab... (1000 characters)`: a user's value, `show`), "more"
    (`abc... [997 more characters]`, `limit` characters before the mark: an error line, `one_line`) or "fit"
    (`ab...`, `limit` characters in all: a cause inside a message, `cause`).

    Args:
        text: the text shortened.
        limit: the most characters kept.
        mark: how the cut is marked: "length", "more" or "fit" (above).
    """
    if len(text) <= limit:
        return text
    if mark == "more":
        return f"{text[:limit]}... [{len(text) - limit:,} more characters]"
    return text[:limit - 3] + ("..." if mark == "fit" else f"... ({len(text)} characters)")


def text_of(value: object) -> str:
    """str(value), or its type's name where that is empty or fails (a hostile __str__).

    Args:
        value: any object (an exception, a user's value).
    """
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - any failure: say what it was instead
        text = ""
    return text or type(value).__name__


MAX_LINE = 500  # characters of an error line; a longer message is cut

FILE_KINDS = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
              (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def file_kind(mode: int) -> str:
    """What a path whose `os.stat` mode is `mode` is, as messages name it: "a regular file", "a folder", "a named
    pipe (FIFO)", "a socket", "a character device", "a block device".

    Args:
        mode: an `os.stat` result's `st_mode`.
    """
    return next((name for test, name in FILE_KINDS if test(mode)), "not a regular file")


def one_line(e: BaseException, limit: int = MAX_LINE) -> str:
    """An exception as one line: its message with line breaks folded, cut to `limit` characters, what a
    terminal would act on escaped (`printable`); the type's name when the message is empty or cannot be rendered.

    Args:
        e: the exception.
        limit: the most characters of the message kept (MAX_LINE).
    """
    return printable(cut(" ".join(text_of(e).split()) or type(e).__name__, limit, "more"))


def cause(e: BaseException, limit: int = 160) -> str:
    """`Type: first line of the message` (the type alone when the message is empty), cut to `limit`: an exception
    inside another message (torch's advice around a refused pickle left out).

    Args:
        e: the exception.
        limit: the most characters of the result.
    """
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    if "WeightsUnpickler error:" in text:  # torch's advice around it is no cause
        text = text.split("WeightsUnpickler error:", 1)[1].split(". ")[0]
    elif text.startswith("Weights only load failed"):  # its first paragraph is advice, the cause comes next
        text = next((p for p in text.split("\n\n")[1:] if p.strip()), text)
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    return cut(f"{type(e).__name__}: {line}" if line else type(e).__name__, limit, "fit")


def printable(text: str) -> str:
    """`text` safe to print: an undecodable byte of a file name (a lone surrogate, as Python decodes it) as
    \\xNN, control and format characters (ESC, BEL, line breaks, bidi overrides) as Python escapes them
    (\\x1b, \\n, \\u202e); everything else as it is.

    Args:
        text: the text to print.
    """
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


def check_size(path: str, size: int, what: str) -> None:
    """A width (or count) that a spec implies: at least 1 (no zero-sized layer) and at most MAX_SIZE.

    Args:
        path: the spec's field path the message names.
        size: the width or count.
        what: what the size is, as the message says it ("the hidden width").
    """
    if size < 1:
        raise SpecError(path, f"{what} is {size}: no layer may be zero-sized")
    if size > MAX_SIZE:
        raise SpecError(path, f"{what} is {size}, above the largest size {MAX_SIZE} (2**31 - 1)")


class SpecError(ValueError):
    """An invalid spec. `path` names the field (`block.attention.heads`), `message` the rule.

    Raised at construction of a spec class (then the path starts with the class name, e.g.
    `MHSA.heads`, because the object does not yet know where it will sit in the tree) and while
    structuring JSON / TOML or applying overrides (then the path runs from the model root).
    """

    def __init__(self, path: str, message: str):
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)

    def under(self, prefix: str | int) -> SpecError:
        """The same error seen from one level up the tree."""
        return SpecError(join(prefix, self.path), self.message)


def join(*parts: str | int) -> str:
    """A dotted field path from its parts, the empty ones left out: `join("blocks", 3, "attention")` ->
    "blocks.3.attention".

    Args:
        *parts: the path's parts (names, or indexes of a list).
    """
    return ".".join(str(p) for p in parts if p != "")


def _type_name(types: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond the largest float
        return False


def check(
    types: type | tuple[type, ...],
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: Iterable[Any] | None = None,
    optional: bool = False,
) -> Callable[[Any, Any, Any], None]:
    """An attrs validator: type check (bools are not ints) plus simple range / choice rules. An int is
    at most MAX_SIZE unless `le` / `lt` says otherwise; a float must be finite.

    Args:
        types: the accepted type or types (an int is a fine float).
        ge: the least value allowed (None: no bound).
        gt: the value to stay above (None: no bound).
        le: the greatest value allowed (None: MAX_SIZE for an int).
        lt: the value to stay below (None: no bound).
        choices: the values allowed (None: any).
        optional: None is allowed too.
    """
    types = types if isinstance(types, tuple) else (types,)
    choices = tuple(choices) if choices is not None else None
    if int in types and le is None and lt is None:
        le = MAX_SIZE
    if float in types and int not in types:
        types = (*types, int)  # an int is a fine float

    def validate(inst: Any, attribute: Any, value: Any) -> None:
        path = f"{type(inst).__name__}.{attribute.name}"
        if value is None:
            if optional:
                return
            raise SpecError(path, f"must be {_type_name(types)}, got None")
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise SpecError(path, f"must be {_type_name(types)}, got {type(value).__name__} {show(value)}")
        if float in types and isinstance(value, (int, float)) and not _finite(value):
            raise SpecError(path, f"must be a finite float, got {show(value)}")
        if choices is not None and value not in choices:
            raise SpecError(path, f"must be one of {', '.join(map(repr, choices))}; got {show(value)}")
        for bound, ok, word in ((ge, lambda b: value >= b, ">="), (gt, lambda b: value > b, ">"),
                                (le, lambda b: value <= b, "<="), (lt, lambda b: value < b, "<")):
            if bound is not None and not ok(bound):
                raise SpecError(path, f"must be {word} {bound}, got {show(value)}")

    return validate


def _float32(value: float) -> float:
    """`value` rounded to float32 (inf beyond its range)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def eps_problem(value: Any) -> str | None:
    """What makes `value` no norm's epsilon (added to a variance before its root), or None: a finite number > 0,
    and so in float32, the dtype the norms compute in (5e-324 is 0 there, 1e39 inf).

    Args:
        value: the epsilon given.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a float, got {type(value).__name__} {show(value)}"
    if not (_finite(value) and value > 0):
        return f"must be a finite float > 0, got {show(value)}"
    single = _float32(value)
    if not (0 < single < math.inf):
        return f"must be > 0 and finite in float32, the norms' dtype; got {show(value)} ({single} there)"
    return None


def check_eps(inst: Any, attribute: Any, value: Any) -> None:
    """attrs validator of a norm's epsilon (`eps_problem`).

    Args:
        inst: the spec being made (its class names the field in the message).
        attribute: the attrs field being checked.
        value: the field's value.
    """
    if (problem := eps_problem(value)) is not None:
        raise SpecError(f"{type(inst).__name__}.{attribute.name}", problem)


def pair(value: Any) -> Any:
    """attrs converter: `224` -> `(224, 224)`; a list of two -> a tuple. Anything else is left to the
    validator, which reports it.

    Args:
        value: the field's value as given.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, list):
        return tuple(value)
    return value


def check_pair(inst: Any, attribute: Any, value: Any) -> None:
    """attrs validator of a size (after `pair`): a tuple of two ints, each from 1 to MAX_SIZE.

    Args:
        inst: the spec being made (its class names the field in the message).
        attribute: the attrs field being checked.
        value: the field's value.
    """
    path = f"{type(inst).__name__}.{attribute.name}"
    if not (isinstance(value, tuple) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise SpecError(path, f"must be an int or a pair of ints, got {show(value)}")
    if min(value) < 1:
        raise SpecError(path, f"must be >= 1, got {show(value)}")
    if max(value) > MAX_SIZE:
        raise SpecError(path, f"must be <= {MAX_SIZE}, got {show(value)}")
