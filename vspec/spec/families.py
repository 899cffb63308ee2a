"""The families the spec language knows: packages that each hold one paper's (or one body's) parts, found in
three ways and nowhere else:
- the packages of `vspec.models` (the papers of this repository),
- the `vspec.families` entry-point group of installed distributions (`name = package`),
- `register_family(package)`, one documented call from any code.

A family package has `spec.py`, torch-free, whose kinds register themselves when it is imported (kinds.KINDS), and
`family.py`, imported only when torch is needed, whose tables the core reads (`tables`): `MODULES` (spec class ->
module class, vspec.compiler), `CONVERTERS` (name -> the converter's dotted path, "pkg.module:NAME", imported by
vspec.convert when a conversion runs), and optionally `FVCORE_HANDLES` (the profiler's count of an op it emits)
and `PRESETS` (a folder of presets, vspec.factory). Where the paper brings them, torch-free modules beside: `paper.py`
(`RECIPES`, its training recipes, vspec.train.recipes; `ANALYSES`, its figures, vspec.analysis: `paper_tables`) and
`datasets.py` (`DATASETS`, vspec.train.data.registry).
The core names no family: it asks this module. Importing this module imports no torch.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
import warnings
from collections.abc import Callable
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

from .kinds import KINDS, unregister

__all__ = [
    "exported", "load", "on_change", "packages", "paper_tables", "presets", "register_family", "rescan", "tables",
    "unregister_family",
]
_BUILTIN = "vspec.models"
_GROUP = "vspec.families"
_registered: list[str] = []
_specs: dict[str, ModuleType] = {}  # package -> its spec module, in the order they were loaded
_refused: dict[str, str] = {}  # package -> why it could not be loaded
_found: list[str] = []  # vspec.models' packages and the entry points', scanned once per process (`rescan`)
_tables: dict[str, dict] = {}  # the merged tables (`tables`), read again when the families change
_listeners: list[Callable[[], None]] = []  # what runs when the families change (`on_change`)


def on_change(listener: Callable[[], None]) -> None:
    """Call `listener()` whenever a family is loaded, registered or forgotten (a table read from the families).

    Args:
        listener: called with no arguments after each change.
    """
    _listeners.append(listener)


def _changed() -> None:
    _tables.clear()
    for listener in _listeners:
        listener()


def rescan() -> None:
    """Look for vspec.models' packages and the installed distributions' entry points again at the next `load` (a
    distribution installed while the process runs); scanning every distribution's metadata takes milliseconds,
    too long for each of the thousands of lookups a build makes."""
    _found.clear()
    _tables.clear()  # the next `tables` loads what is new


def packages() -> list[str]:
    """Every family package, once: vspec.models' own, then the entry points', then the registered ones."""
    if not _found:
        builtin = importlib.import_module(_BUILTIN)
        names = [f"{_BUILTIN}.{m.name}" for m in pkgutil.iter_modules(builtin.__path__) if m.ispkg]
        _found.extend(dict.fromkeys([*names, *(ep.value for ep in entry_points(group=_GROUP))]))
    return list(dict.fromkeys([*_found, *_registered]))


def load() -> dict[str, ModuleType]:
    """Import the spec module of every family not yet loaded (its kinds register); {package: spec module}. A
    package of another distribution that fails to import is skipped with a warning (vspec itself still imports);
    one of vspec's own, or a registered one, raises."""
    new = [name for name in packages() if name not in _specs and name not in _refused]
    for name in new:
        try:
            _specs[name] = importlib.import_module(f"{name}.spec")
        except Exception as e:  # noqa: BLE001 - a broken installed plugin must not break `import vspec`
            if name.startswith(f"{_BUILTIN}.") or name in _registered:
                raise
            _refused[name] = f"{type(e).__name__}: {e}"
            warnings.warn(f"vspec family {name!r} (entry point {_GROUP}) could not be loaded: {_refused[name]}",
                          stacklevel=2)
    if any(name in _specs for name in new):
        _changed()
    return dict(_specs)


def exported() -> dict[str, Any]:
    """The public names of every loaded family's spec module (its `__all__`), for `vspec.spec.<Name>`. Two families
    exporting one name is an error."""
    out: dict[str, Any] = {}
    for package, module in _specs.items():
        for name in getattr(module, "__all__", ()):
            if name in out and out[name] is not getattr(module, name):
                raise ImportError(f"vspec family {package!r} exports {name!r}, which another family exports already")
            out[name] = getattr(module, name)
    return out


def register_family(package: str) -> ModuleType:
    """Make the family in `package` (an importable package with `spec.py` and `family.py`) known: its kinds to
    the spec language, files and `--set` (and its spec module's `__all__` as `vspec.spec.<Name>`); its modules,
    converters, profiler handles and presets to the compiler, `from_official`, the profiler and `create_model`.
    Returns its spec module. Registering it again does nothing.

    Args:
        package: the family's importable package name ("my_models.gated").
    """
    if not isinstance(package, str) or not package:
        raise TypeError(f"register_family takes a package name, got {package!r}")
    if package not in _registered:
        _registered.append(package)
    load()
    exported()  # its names clash with no other family's
    return _specs[package]


def unregister_family(package: str) -> None:
    """Forget a family registered with `register_family` (a test's own, when the test ends): its kinds, its names
    in `vspec.spec`, its entries in the merged tables (`tables`) and its modules (a later `register_family`
    imports it again).

    Args:
        package: the package given to `register_family`.
    """
    module = _specs.pop(package, None)
    if package in _registered:
        _registered.remove(package)
    if module is None:
        return
    for cls in [c for c in KINDS.values() if c.__module__ == module.__name__]:
        unregister(cls)
    for name in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
        del sys.modules[name]  # registered again later: imported afresh, its kinds defined (registered) again
    _changed()


def tables(name: str) -> dict:
    """Every loaded family's `family.<name>` table merged (MODULES, CONVERTERS, FVCORE_HANDLES); imports the
    families' family.py (torch). Two families giving one key is an error. Read once until the families change
    (`_changed`); not to be modified.

    Args:
        name: the table's name in each family.py ("MODULES", "CONVERTERS", "FVCORE_HANDLES").
    """
    if name in _tables:  # (the compiler asks once per component: no scan until the families change)
        return _tables[name]
    load()
    merged: dict = {}
    for package in _specs:
        table = getattr(importlib.import_module(f"{package}.family"), name, {})
        clash = next((k for k in table if k in merged and merged[k] is not table[k]), None)
        if clash is not None:
            raise ImportError(f"vspec family {package!r}: its {name} entry {clash!r} is another family's already")
        merged.update(table)
    _tables[name] = merged
    return merged


def presets() -> list[Any]:
    """The preset folders the families declare (`family.PRESETS`), in the order they were loaded."""
    load()
    folders = (getattr(importlib.import_module(f"{package}.family"), "PRESETS", None) for package in _specs)
    return [f for f in folders if f is not None]


def paper_tables(name: str) -> dict:
    """Every family package's `paper.<name>` table merged (RECIPES, ANALYSES), torch-free: `paper.py` is imported, not
    `family.py`; a package without one declares none. Two families giving one key is an error. Read once until the
    families change; not to be modified.

    Args:
        name: the table's name in each paper.py ("RECIPES", "ANALYSES").
    """
    key = f"paper.{name}"
    if key in _tables:
        return _tables[key]
    merged: dict = {}
    for package in packages():
        try:
            found = importlib.util.find_spec(f"{package}.paper")
        except ImportError:  # the package itself is missing: `load` reports it
            continue
        table = getattr(importlib.import_module(f"{package}.paper"), name, {}) if found is not None else {}
        clash = next((k for k in table if k in merged and merged[k] != table[k]), None)
        if clash is not None:
            raise ImportError(f"vspec family {package!r}: its {name} entry {clash!r} is another family's already")
        merged.update(table)
    _tables[key] = merged
    return merged
