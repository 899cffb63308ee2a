"""JSON / TOML forms of a spec, through one cattrs converter.

Union members carry a `kind` tag; unknown keys and unknown kinds are errors that name the field
path and list what is allowed. Leaf values are type-checked strictly (no "3" -> 3, no 1 -> True).
TOML has no null: keys whose value is None are left out when writing, which is lossless because
every optional field defaults to None (a test holds every spec class to that).
"""

import json
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

import attrs
import cattrs
import tomli_w

from .errors import SpecError, cut, show, show_key
from .kinds import ROLE_BASES, ROLES, Kind
from .migrate import VERSION, upgrade
from .model import SHORTHAND, Model, Stage

__all__ = [
    "WRITTEN_WHEN_SET", "converter", "first_difference", "from_dict", "from_json", "from_toml", "to_dict", "to_json",
    "to_toml",
]
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _is_union(t: Any) -> bool:
    return typing.get_origin(t) in (typing.Union, types.UnionType)


def _tag(cls: type) -> str | None:
    return cls.kind if issubclass(cls, Kind) else None


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {show(value)}"


def _strict(t: type):
    def structure(value: Any, _: Any) -> Any:
        ok = isinstance(value, t) and not (isinstance(value, bool) and t is not bool)
        if t is float and isinstance(value, int) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                raise SpecError("", f"must be a finite float, got {show(value)}") from None
        if not ok:
            raise SpecError("", f"must be {t.__name__}, got {_describe(value)}")
        return value
    return structure


def _structure_literal(value: Any, t: Any) -> Any:
    allowed = typing.get_args(t)
    if value not in allowed or isinstance(value, bool) != isinstance(allowed[0], bool):
        raise SpecError("", f"must be one of {', '.join(map(repr, allowed))}; got {show(value)}")
    return value


def _init_types(cls: type) -> dict[str, Any]:
    """The keys a table of `cls` may have, with their types (a Model also takes its stage shorthand)."""
    types = {name: f.type for name, f in attrs.fields_dict(cls).items()}
    if cls is Model:
        stage = attrs.fields_dict(Stage)
        types = {"embedder": types.pop("embedder"), **{k: stage[k].type for k in SHORTHAND}, **types}
    return types


def _structure_attrs_factory(cls: type):
    fields = _init_types(cls)
    tag = _tag(cls)

    def structure(data: Any, _: Any) -> Any:
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise SpecError("", f"must be a table of {cls.__name__} fields, got {_describe(data)}")
        data = dict(data)
        if tag is not None and "kind" in data:
            kind = data.pop("kind")
            if kind != tag:
                raise SpecError("kind", f"unknown kind {show(kind)}; allowed: {tag!r}")
        for key in data:
            if key not in fields:
                raise SpecError(show_key(key), f"unknown key for {cls.__name__}; allowed: {', '.join(fields)}")
        kwargs = {}
        for name, value in data.items():
            try:
                kwargs[name] = converter.structure(value, fields[name])
            except SpecError as e:
                raise e.under(name) from None
        try:
            return cls(**kwargs)
        except SpecError as e:  # a validator's "Cls.field" path becomes relative to this object
            prefix = f"{cls.__name__}."
            raise SpecError(e.path.removeprefix(prefix), e.message) from None

    return structure


def _structure_union(value: Any, t: Any) -> Any:
    members = typing.get_args(t)
    if type(None) in members and value is None:
        return None
    if any((attrs.has(m) or m in ROLE_BASES.values()) and isinstance(value, m) for m in members):
        return value
    rest = [m for m in members if m is not type(None)]
    if len(rest) == 1:  # Optional[X]
        return converter.structure(value, rest[0])
    for m in rest:  # e.g. BlockKind | tuple[BlockKind, ...]: a table is the first, a list the second
        origin = typing.get_origin(m) or m
        table = attrs.has(m) or m in ROLE_BASES.values()
        if isinstance(value, (list, tuple)) and origin is tuple or isinstance(value, Mapping) and table:
            return converter.structure(value, m)
    names = " or ".join(getattr(m, "__name__", str(m)) for m in rest)
    raise SpecError("", f"must be {names}, got {_describe(value)}")


def _structure_kind(value: Any, base: type) -> Any:
    """A field that holds a kind of `base`'s role: the table's `kind` picks the class (kinds.ROLES)."""
    if isinstance(value, base):
        return value
    by_kind = {m.kind: m for m in ROLES.get(base.role, ())}
    if not isinstance(value, Mapping):
        raise SpecError("", f"must be a table with a 'kind' ({', '.join(by_kind)}), got {_describe(value)}")
    if "kind" not in value:
        raise SpecError("kind", f"missing; allowed: {', '.join(by_kind)}")
    if not isinstance(value["kind"], str) or value["kind"] not in by_kind:
        raise SpecError("kind", f"unknown kind {show(value['kind'])}; allowed: {', '.join(by_kind)}")
    return converter.structure(value, by_kind[value["kind"]])


def _structure_tuple(value: Any, t: Any) -> Any:
    args = typing.get_args(t)
    if isinstance(value, int) and not isinstance(value, bool) and args and all(a is int for a in args):
        value = [value] * len(args)  # img_size = 224 means (224, 224)
    if not isinstance(value, (list, tuple)):
        raise SpecError("", f"must be a list, got {_describe(value)}")
    if len(args) == 2 and args[1] is Ellipsis:
        item_types = [args[0]] * len(value)
    else:
        if len(value) != len(args):
            raise SpecError("", f"must have {len(args)} items, got {len(value)}")
        item_types = list(args)
    out = []
    for i, (v, it) in enumerate(zip(value, item_types)):
        try:
            out.append(converter.structure(v, it))
        except SpecError as e:
            raise e.under(i) from None
    return tuple(out)


# Fields added after format 2 that are written only when set: a file of a model that leaves them at their default
# stays what earlier releases wrote and read (they refuse unknown keys). By class name; Model's own below.
_FIELDS_WRITTEN_WHEN_SET = {("DenseAux", "mix_token"): False}


def _unstructure_attrs(obj: Any) -> dict[str, Any]:
    tag = _tag(type(obj))
    out = {"kind": tag} if tag is not None else {}
    for f in attrs.fields(type(obj)):
        value, key = getattr(obj, f.name), (type(obj).__name__, f.name)
        if key not in _FIELDS_WRITTEN_WHEN_SET or value is not _FIELDS_WRITTEN_WHEN_SET[key]:
            out[f.name] = converter.unstructure(value)
    return out


WRITTEN_WHEN_SET = {"dynamic_img_size": False, "attention_maps": False}


def _unstructure_model(model: Model) -> dict[str, Any]:
    """The format version first; a one-stage model in its block / depth / dim form."""
    out: dict[str, Any] = {"version": VERSION}
    for key, value in _unstructure_attrs(model).items():
        if key in WRITTEN_WHEN_SET and value is WRITTEN_WHEN_SET[key]:
            continue
        if key == "stages" and model.isotropic:
            out.update((k, value[0][k]) for k in SHORTHAND)
        else:
            out[key] = value
    return out


converter = cattrs.Converter(detailed_validation=False)
for _t in (int, float, bool, str):
    converter.register_structure_hook(_t, _strict(_t))
converter.register_structure_hook_func(lambda t: typing.get_origin(t) is Literal, _structure_literal)
converter.register_structure_hook_func(_is_union, _structure_union)
converter.register_structure_hook_func(lambda t: typing.get_origin(t) is tuple, _structure_tuple)
converter.register_structure_hook_func(lambda t: t in ROLE_BASES.values(), _structure_kind)
converter.register_structure_hook_factory(attrs.has, _structure_attrs_factory)
converter.register_unstructure_hook_func(attrs.has, _unstructure_attrs)
converter.register_unstructure_hook(Model, _unstructure_model)
converter.register_unstructure_hook(tuple, lambda t: [converter.unstructure(v) for v in t])


def to_dict(spec: Any) -> dict[str, Any]:
    """The spec as plain data: every component a table with its `kind` tag, a Model with its format `version`.

    Args:
        spec: a Model or one of its components.
    """
    return converter.unstructure(spec)


def from_dict(data: Any, cls: type = Model) -> Any:
    """Structure a spec; a Model table of an earlier format version is upgraded first.

    Args:
        data: the spec as plain data (`to_dict`'s).
        cls: the class to structure (Model, or a component's).
    """
    if cls is Model:
        data = upgrade(data)[0]
    return converter.structure(data, cls)


def first_difference(a: Any, b: Any) -> tuple[str, Any, Any] | None:
    """Where two specs (or components) first differ, walking their `to_dict` data in key order: (the dotted path,
    a's value, b's value); a component whose kind differs is the difference itself (`<path>.kind` and the two
    kinds), not its fields; a listed stack of blocks beside one repeated block, each listed one against it. None
    where they are equal.

    Args:
        a: the first spec or component.
        b: the second.
    """

    def walk(x: Any, y: Any, path: str) -> tuple[str, Any, Any] | None:
        if isinstance(x, dict) and isinstance(y, dict):
            if x.get("kind") != y.get("kind"):
                return f"{path}.kind" if path else "kind", x.get("kind"), y.get("kind")
            for key in sorted(set(x) | set(y)):
                if found := walk(x.get(key), y.get(key), f"{path}.{key}" if path else key):
                    return found
            return None
        if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            pairs = zip(x, y)
        elif isinstance(x, list) and isinstance(y, dict) or isinstance(x, dict) and isinstance(y, list):
            pairs = zip(x, [y] * len(x)) if isinstance(x, list) else zip([x] * len(y), y)  # listed vs repeated block
        else:
            return None if x == y else (path, x, y)
        return next((found for i, (u, v) in enumerate(pairs) if (found := walk(u, v, f"{path}.{i}"))), None)

    return walk(to_dict(a), to_dict(b), "")


def to_json(spec: Any, indent: int | None = 2) -> str:
    """The spec as JSON (`to_dict`'s data); `from_json` reads it back as the same spec.

    Args:
        spec: a Model or one of its components.
        indent: JSON's indent (None: one line).
    """
    return json.dumps(to_dict(spec), indent=indent)


def _parsed(parse: Any, text: str, errors: tuple[type[Exception], ...], cls: type, fmt: str) -> Any:
    """Parse `text` and structure it; syntax errors, nesting beyond the recursion limit and integers
    beyond Python's digit limit (ValueError) are SpecErrors."""
    try:
        data = parse(text)
    except errors as e:
        raise SpecError("", f"invalid {fmt}: {cut(str(e))}") from None
    except RecursionError:
        raise SpecError("", f"invalid {fmt}: nested too deeply") from None
    except ValueError as e:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise SpecError("", f"invalid {fmt}: {cut(str(e).split(';')[0])}") from None
    try:
        return from_dict(data, cls)
    except RecursionError:
        raise SpecError("", f"{fmt} value nested too deeply") from None


def from_json(text: str, cls: type = Model) -> Any:
    """A spec from JSON: validated, earlier format versions upgraded; a bad file is one `SpecError` line.

    Args:
        text: the JSON text.
        cls: the class to read (Model, or a component's).
    """
    return _parsed(json.loads, text, (json.JSONDecodeError,), cls, "JSON")


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def to_toml(spec: Any) -> str:
    """The spec as TOML (unset optional fields left out); `from_toml` reads it back as the same spec.

    Args:
        spec: a Model or one of its components.
    """
    return tomli_w.dumps(_drop_none(to_dict(spec)))


def from_toml(text: str, cls: type = Model) -> Any:
    """A spec from TOML: validated, earlier format versions upgraded; a bad file is one `SpecError` line.

    Args:
        text: the TOML text.
        cls: the class to read (Model, or a component's).
    """
    return _parsed(tomllib.loads, text, (tomllib.TOMLDecodeError,), cls, "TOML")
