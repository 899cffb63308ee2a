"""The addresses of a pack's files and its manifest, for --data shards (vspec/train/data/shards.py): a --data-dir as
a folder, a URL prefix or a pattern of training shards; every file opened so that a read ends; the manifest read
with a bound and checked field by field.

A manifest is data, never a command: its shard names are exactly those `vspec data pack` writes
(`train-000000.tar`, `vspec.train.data.pack.is_shard_name`), so that none reaches a shell (appended to a `pipe:`
--data-dir), a parent folder or another host; only the user's own --data-dir may be a `pipe:` command.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from urllib.parse import urlparse
from urllib.request import url2pathname

from ...extras import needs
from ...spec.errors import file_kind, show
from .pack import FORMAT, SPLITS, is_shard_name
from .registry import DataError

with needs("--data shards"):
    from webdataset.gopen import gopen
    from webdataset.shardlists import envsubst
with needs("--data shards"):  # webdataset's own brace patterns, installed with it
    from braceexpand import braceexpand, make_char_range

__all__ = ["MAX_COUNT", "MAX_MANIFEST", "MAX_NESTING", "MAX_SHARDS", "check_manifest", "close_quietly", "expand",
           "locate", "open_file", "read_manifest", "shard_in"]

MAX_MANIFEST = 64 << 20  # bytes: a manifest of 500,000 shards
MAX_SHARDS = 10**6  # names a --data-dir pattern may expand to (pack's six digits)
MAX_NESTING = 8  # braces inside braces in a pattern
MAX_COUNT = 2**31 - 1  # samples of a shard
# a shard's file name in a path, URL or pipe: command: a whole name (a search from inside a name would be
# quadratic in a long --data-dir)
_TAR_NAME = re.compile(r"(?<![^/\s'\"])[^/\s'\"]+\.tar")
_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$")  # braceexpand's grammar
_CHAR_RANGE = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?$")
_SHA256 = re.compile(r"[0-9a-f]{64}")


# ---------------------------------------------------------------- patterns
def _count(pattern: str) -> int:
    """How many names braceexpand makes of `pattern`, counted without making them (its grammar: ranges,
    sequences, nesting, backslash escapes)."""
    count, depth, start, pos = 1, 0, 0, 0
    while pos < len(pattern):
        c = pattern[pos]
        if c == "\\":
            pos += 2
            continue
        if c == "{":
            depth += 1
            start = pos if depth == 1 else start
        elif c == "}":
            depth -= 1
            if depth == 0:
                count *= _count_expression(pattern[start + 1:pos])
        pos += 1
    return count


def _count_expression(expr: str) -> int:
    if m := _INT_RANGE.match(expr):
        return abs(int(m[2]) - int(m[1])) // (int(m[3] or 0) or 1) + 1
    if m := _CHAR_RANGE.match(expr):
        return len(make_char_range(*m.groups()))  # at most 52
    parts, depth, start, pos = [], 0, 0, 0
    while pos < len(expr):
        c = expr[pos]
        if c == "\\":
            pos += 2
            continue
        depth += (c == "{") - (c == "}")
        if c == "," and depth == 0:
            parts.append(expr[start:pos])
            start = pos + 1
        pos += 1
    if depth != 0 or not parts:  # not a sequence: the braces are kept, their inside expanded
        return _count(expr)
    return sum(_count(p) for p in (*parts, expr[start:]))


def _nesting(pattern: str) -> int:
    depth, deepest = 0, 0
    for c in re.sub(r"\\.", "", pattern, flags=re.S):
        depth += (c == "{") - (c == "}")
        deepest = max(deepest, depth)
    return deepest


def expand(pattern: str) -> list[str]:
    """webdataset's expansion of a pattern of shards (`::` between patterns, `${VAR}` from WDS_VAR, braces),
    its names counted first: more than MAX_SHARDS is a DataError, not a list that fills the memory.

    Args:
        pattern: the shards' pattern."""
    patterns = []
    for part in pattern.split("::"):
        for _ in range(10):
            part, last = envsubst(part), part
            if part == last:
                break
        patterns.append(part)
    if max(map(_nesting, patterns)) > MAX_NESTING:
        raise DataError(f"shards: --data-dir {show(pattern)} nests braces more than {MAX_NESTING} deep")
    try:
        total = sum(map(_count, patterns))
        names = [] if total > MAX_SHARDS else [name for part in patterns for name in braceexpand(part)]
    except ValueError as e:  # unbalanced braces, a number past Python's digit limit
        raise DataError(f"shards: --data-dir {show(pattern)} is no pattern of shards: {e}") from None
    if total > MAX_SHARDS:
        raise DataError(f"shards: --data-dir {show(pattern)} expands to {show(total)} names, more than the "
                        f"{MAX_SHARDS:,} shards a pack may have")
    return names


def locate(data_dir: str) -> tuple[tuple[str, str], list[str] | None]:
    """((before, after): a file of the pack is at before + its name + after; the training shards' addresses, or
    None: the manifest's).

    Args:
        data_dir: --data-dir: a pack's folder or URL, or a pattern of its training shards."""
    text = str(data_dir)
    if not _TAR_NAME.search(text):
        return (text.rstrip("/") + "/", ""), None
    urls = expand(text)
    last = list(_TAR_NAME.finditer(urls[0]))[-1]  # the first shard's file name, in a path, URL or pipe: command
    return (urls[0][:last.start()], urls[0][last.end():]), urls


def shard_in(url: str) -> str:
    """The file name of the shard at `url` (a pattern's).

    Args:
        url: the shard's path, URL or pipe: command."""
    return _TAR_NAME.findall(url)[-1]


# ---------------------------------------------------------------- reading
def open_file(url: str):
    """A pack's file for reading: a local path (or file: URL) only when it is a regular file (a FIFO would block
    the read, a device such as /dev/zero never ends: a DataError); a URL or a pipe: command through webdataset's
    gopen.

    Args:
        url: the file's path, URL or pipe: command."""
    parsed = urlparse(url)
    if parsed.scheme not in ("", "file"):
        return gopen(url, "rb")
    path = url2pathname(parsed.path) if parsed.scheme else url
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once, to be refused
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise DataError(f"shards: {path} is {file_kind(mode)}, not a file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def close_quietly(f) -> None:
    """Close a file that was not read to its end: a pipe: command stopped by its closed output is no error.

    Args:
        f: the file `open_file` opened."""
    with contextlib.suppress(OSError):
        f.close()


def _read(url: str, limit: int) -> bytes:
    """At most `limit` + 1 bytes of the file at `url`."""
    f = open_file(url)
    try:
        data = f.read(limit + 1)
        if len(data) <= limit:
            f.close()  # read to its end: a pipe: command's exit status counts
    finally:
        close_quietly(f)
    return data


def read_manifest(url: str) -> dict:
    """The manifest at `url`, checked (`check_manifest`); at most MAX_MANIFEST bytes are read.

    Args:
        url: the manifest's path, URL or pipe: command."""
    try:
        data = _read(url, MAX_MANIFEST)
    except FileNotFoundError:
        raise DataError(f"shards: no manifest {url} (vspec data pack writes it beside the shards)") from None
    except OSError as e:
        raise DataError(f"shards: cannot read the manifest {url}: {e}") from None
    if len(data) > MAX_MANIFEST:
        raise DataError(f"shards: the manifest {url} is larger than {MAX_MANIFEST >> 20} MiB: no manifest of vspec "
                        "data pack")
    try:
        manifest = json.loads(data)
    except RecursionError:
        raise DataError(f"shards: cannot read the manifest {url}: JSON nested too deeply") from None
    except ValueError as e:  # not JSON, not UTF-8
        raise DataError(f"shards: cannot read the manifest {url}: {e}") from None
    check_manifest(manifest, url)
    return manifest


def check_manifest(manifest, url: str) -> None:
    """A DataError naming the first field of `manifest` that `vspec data pack` would not have written: the
    format, the class names (at least one), per split every shard's name (pack's, once), sample count (an int in
    [1, MAX_COUNT]) and sha256 (64 hex digits); at least one training and one validation shard (without them no
    epoch trains, or nothing measures val_loss and picks best.pt).

    Args:
        manifest: the manifest read (JSON).
        url: where it was read (named in the error line)."""
    def bad(field: str, want: str, value) -> DataError:
        return DataError(f"shards: manifest {url}: {field} must be {want}, got {show(value)}")

    if not isinstance(manifest, dict):
        raise bad("the manifest", "a JSON object", type(manifest).__name__)
    if manifest.get("format") != FORMAT:
        raise bad("format", f"{FORMAT!r} (vspec data pack's)", manifest.get("format"))
    classes = manifest.get("classes")
    if not (isinstance(classes, list) and classes and all(isinstance(c, str) for c in classes)
            and len(set(classes)) == len(classes)):
        raise bad("classes", "a list of distinct class names, at least one", classes)
    for split in SPLITS:
        shards = manifest.get(split)
        if not isinstance(shards, list):
            raise bad(split, "a list of shards", shards)
        seen = set()
        for i, shard in enumerate(shards):
            where = f"{split}[{i}]"
            if not isinstance(shard, dict):
                raise bad(where, "an object with name, count and sha256", shard)
            name, count, digest = shard.get("name"), shard.get("count"), shard.get("sha256")
            if not is_shard_name(split, name) or name in seen:
                raise bad(f"{where}.name", f"a shard name as vspec data pack writes them ({split}-000000.tar, "
                                           "...), each once", name)
            if type(count) is not int or not 1 <= count <= MAX_COUNT:
                raise bad(f"{where}.count", "an int in [1, 2**31 - 1]", count)
            if not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
                raise bad(f"{where}.sha256", "64 hex digits", digest)
            seen.add(name)
    if not manifest["train"]:
        raise DataError(f"shards: {url} lists no training shards: nothing to train on")
    if not manifest["val"]:  # pack refuses an empty val folder: validation is never silently skipped
        raise DataError(f"shards: {url} lists no validation shards: nothing would measure val_loss or pick best.pt; "
                        "pack an image folder with val/<class>/ images (vspec data pack)")

