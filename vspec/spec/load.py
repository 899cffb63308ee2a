"""Reading spec files and applying dotted overrides."""

import ast
import json
import runpy
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from .errors import SpecError, join, show, show_key, text_of
from .model import KINDS, SHORTHAND, Model
from .serialize import WRITTEN_WHEN_SET, converter, from_dict, from_json, from_toml, to_dict
from .weights import PublishedWeights, check_table

__all__ = ["SUFFIXES", "load_weights_table", "override", "parse_assignment", "parse_value", "read_spec"]
SUFFIXES = (".py", ".json", ".toml")


def _run(path: Path, name: str = "SPEC") -> object:
    """Execute a .py spec file and return its `name` (SPEC, WEIGHTS); whatever it raises (sys.exit and
    KeyboardInterrupt too) becomes a SpecError naming the file and the line."""
    try:
        return runpy.run_path(str(path)).get(name)
    except SpecError:
        raise
    except BaseException as e:  # noqa: BLE001 - a spec file reports in one line, never exits or interrupts
        line = next(
            (f.lineno for f in reversed(traceback.extract_tb(e.__traceback__)) if f.filename == str(path)), "?"
        )
        if isinstance(e, SystemExit):
            what = f"called sys.exit({'' if e.code is None else repr(e.code)}) instead of defining SPEC"
        elif isinstance(e, SyntaxError) and e.lineno:
            line, what = e.lineno, f"SyntaxError: {e.msg}"
        else:
            what = f"{type(e).__name__}: {text_of(e)}" if text_of(e) != type(e).__name__ else type(e).__name__
        raise SpecError("", f"{path}, line {line}: {what}") from None


def read_spec(path: str | Path) -> Model:
    """Read a Model spec file: a `.py` file (module-level `SPEC`), `.json` or `.toml` (a preset's name: `load_spec`,
    vspec/spec/catalogue.py).

    Args:
        path: the spec file.
    """
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise SpecError("", f"{path}: unsupported spec file type {path.suffix!r}; allowed: {', '.join(SUFFIXES)}")
    if path.is_dir():
        raise SpecError("", f"{path}: is a folder, not a spec file")
    if not path.is_file():  # (a named pipe would block the read)
        raise SpecError("", f"{path}: {'not a regular file' if path.exists() else 'no such file'}")
    if path.suffix == ".py":
        spec = _run(path)
        if not isinstance(spec, Model):
            raise SpecError("", f"{path}: must define SPEC = Model(...), got {type(spec).__name__}")
        return spec
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SpecError("", f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    try:
        return from_json(text) if path.suffix == ".json" else from_toml(text)
    except SpecError as e:
        if e.path:
            raise
        raise SpecError("", f"{path}: {e.message}") from None


def load_weights_table(path: str | Path) -> dict[str, PublishedWeights]:
    """The published weights a `.py` preset declares (`WEIGHTS`, vspec.spec.weights); {} where it declares none.

    Args:
        path: the preset's file.
    """
    path = Path(path)
    if path.suffix != ".py" or not path.is_file():
        return {}
    table = _run(path, "WEIGHTS")
    return {} if table is None else check_table(table, str(path))


def parse_value(text: str) -> Any:
    """A CLI override value: JSON (6, 0.1, true, null, "x", [224, 224], {"kind": "gap"}), Python
    literals (True, None), or else the bare string (gap).

    Args:
        text: the value as written on the command line.
    """
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):  # e.g. {[]: 1}, [[[...]]]
            pass
    return text


def parse_assignment(text: str) -> tuple[str, Any]:
    """`block.attention.heads=6` -> ("block.attention.heads", 6).

    Args:
        text: `key=value`, as written on the command line.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise SpecError("", f"override {show(text)} must look like key=value (e.g. block.attention.heads=6)")
    return key.strip(), parse_value(value.strip())


def _fits(value: Any, field_type: Any) -> bool:
    """Whether a field value of the old kind is valid for the new kind's field of the same name."""
    try:
        converter.structure(value, field_type)
    except SpecError:
        return False
    return True


class _Unset(dict):
    """A component that was None; its keys are checked when the tree is structured."""


def _set(tree: Any, keys: list[str], value: Any, done: list[str]) -> Any:
    """Return a copy of `tree` (unstructured spec) with `value` at `keys`."""
    key, rest = keys[0], keys[1:]
    path = join(*done, show_key(key))
    if isinstance(tree, list):
        if not key.isdigit() or int(key) >= len(tree):
            raise SpecError(path, f"no such list index; the list has {len(tree)} items")
        out, index = list(tree), int(key)
    elif isinstance(tree, Mapping):
        if not done and key in SHORTHAND and "stages" in tree:
            raise SpecError(key, f"the model has {len(tree['stages'])} stages: set stages.<i>.{key} instead")
        if key not in tree and not isinstance(tree, _Unset):
            raise SpecError(path, f"unknown key; allowed here: {', '.join(tree)}")
        out, index = dict(tree), key
    else:
        raise SpecError(join(*done), f"is {show(tree)}, which has no field {show(key)}")
    current = out.get(index) if isinstance(out, dict) else out[index]  # a key new to an unset component: none
    if not rest and isinstance(value, str) and isinstance(current, Mapping) and "kind" in current:
        return _set(out, [index, "kind"], value, done)  # `head=gap` means `head.kind=gap`, `...norm=batchnorm` too
    if not rest:
        switching = key == "kind" and isinstance(out, dict) and isinstance(current, str) and current in KINDS
        out[index] = value
        if switching:  # a component changes kind: keep the fields the new kind has
            cls = KINDS.get(value) if isinstance(value, str) else None
            if cls is not None:
                fields = attrs.fields_dict(cls)
                try:
                    base = to_dict(cls())
                except (TypeError, SpecError):  # a kind with a field that has no default (a coupled block's conv)
                    base = {"kind": value}
                out = {**base, **{k: v for k, v in out.items() if k in fields and _fits(v, fields[k].type)}}
        return out
    child = out[index]
    if child is None:
        child = _Unset()  # e.g. head.norm.eps=1e-5 while head.norm is None: start from the defaults
    out[index] = _set(child, rest, value, [*done, key])
    return out


def override(spec: Model, assignments: Mapping[str, Any]) -> Model:
    """Apply dotted assignments, e.g. `{"block.attention.heads": 6}`, type-checked like a spec file.

    A repeated block (`block` is one Block) is addressed as `block.x`; a listed stack as `block.3.x`;
    on a model with several stages, `stages.1.block.x`, `stages.1.depth`.
    Setting `....kind` switches a component and keeps the fields the new kind shares where their
    values fit it (the others take the new kind's defaults); a bare string given to a component or a
    norm sets its kind (`head=gap`, `block.ffn.norm=layernorm`). A stack given as a list without a
    depth of its own sets the depth to its length.

    Args:
        spec: the model spec overridden.
        assignments: dotted field path -> value (as a spec file would hold it).
    """
    tree = {**WRITTEN_WHEN_SET, **to_dict(spec)}  # fields left out of files at their default can be set too
    version = tree.pop("version")  # the format, not a field to set
    for key, value in assignments.items():
        if not isinstance(key, str) or "" in key.split("."):
            raise SpecError("", f"override key {show(key)} must be a dotted field path, e.g. block.attention.heads")
        tree = _set(tree, key.split("."), value, [])
    for key, value in assignments.items():
        stage = key.removesuffix("block")
        if key.endswith("block") and isinstance(value, list) and value and f"{stage}depth" not in assignments:
            tree = _set(tree, f"{stage}depth".split("."), len(value), [])
    return from_dict({"version": version, **tree})
