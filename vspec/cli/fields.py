"""The flags of the training configuration (vspec/train/config.py, recipes.py), derived from its classes' fields, so
a field added with its help is a flag of every command that adds its class's group. Torch-free.

A field's attrs `metadata` may hold: "help"; "flag" (its spelling, default `--` + the name with `-` for `_`; None:
no flag, the command writes its own); "metavar"; "choices" (a value or a function of none); "required"; "off" (the
flag's value that means None, as `--ema-decay 0`). The validator gives the type: a `Range` its kind (int, float),
`OneOf` the choices, `Is((bool,))` a switch (`--x`, or `--x / --no-x` where the default is True or not given)."""

from __future__ import annotations

import argparse

import attrs

from ..train.validators import Is, OneOf, Range

__all__ = ["add_fields", "field_rules", "flag", "flags", "given"]


def flag(field: attrs.Attribute) -> str | None:
    """The field's flag (`--ema-decay`), None where it has none.

    Args:
        field: an attrs field of a configuration class (its metadata's "flag", if any)."""
    return field.metadata.get("flag", "--" + field.name.replace("_", "-"))


def _dest(field: attrs.Attribute) -> str:
    """Where argparse puts the flag's value (`--data`: args.data)."""
    return flag(field)[2:].replace("-", "_")


def _flag_fields(cls: type, only=None) -> list[attrs.Attribute]:
    """The fields of `cls` that have a flag (those named in `only`, when given), in the class's order."""
    return [f for f in attrs.fields(cls) if flag(f) and (only is None or f.name in only)]


def flags(*classes: type) -> dict[str, str]:
    """Field name -> flag, over `classes`: what a `ConfigError` naming the field is reported by.

    Args:
        *classes: the configuration classes."""
    return {f.name: flag(f) for cls in classes for f in _flag_fields(cls)}


def _value(v):
    return v() if callable(v) else v


def add_fields(group, cls: type, only=None, unset: bool = False) -> None:
    """A flag for each field of `cls` (those in `only`) on `group`, defaulting to the field's default, or with
    `unset` to None ("not given": the caller falls back to another value, as a named recipe's).

    Args:
        group: the parser or argument group the flags go on.
        cls: the configuration class.
        only: the field names to add (None: every field with a flag).
        unset: default every flag to None instead of the field's default."""
    for f in _flag_fields(cls, only):
        meta = f.metadata
        default = None if unset or f.default is attrs.NOTHING or isinstance(f.default, attrs.Factory) else f.default
        kw = {"dest": _dest(f), "default": default, "help": _value(meta.get("help"))}
        kw.update({k: _value(meta[k]) for k in ("metavar", "choices", "required") if k in meta})
        check = f.validator
        if isinstance(check, Is) and check.types == (bool,):
            kw["action"] = "store_true" if default is False else argparse.BooleanOptionalAction
        elif isinstance(check, Range):
            kw["type"] = check.kind
        elif isinstance(check, OneOf) and "choices" not in kw:
            kw["choices"] = check.choices
        group.add_argument(flag(f), **kw)


def given(cls: type, args: argparse.Namespace, only=None) -> dict:
    """The values of `cls`'s flags in `args` by field name: a flag not given (None) left out, one given its "off"
    value None.

    Args:
        cls: the configuration class.
        args: the parsed command line.
        only: the field names to read (None: every field with a flag)."""
    out = {}
    for f in _flag_fields(cls, only):
        value = getattr(args, _dest(f), None)
        if value is not None:
            out[f.name] = None if "off" in f.metadata and value == f.metadata["off"] else value
    return out


def field_rules(cls: type, only=None) -> dict[str, Range]:
    """Each numeric flag's rule, by dest: its field's validator (for `check_flags`).

    Args:
        cls: the configuration class.
        only: the field names to take (None: every field with a flag)."""
    return {_dest(f): f.validator for f in _flag_fields(cls, only) if isinstance(f.validator, Range)}
