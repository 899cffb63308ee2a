"""The analyses behind `vspec analyze`: the table of every family's (`analyses`; each figure a family's paper plots is
an `Analysis` record, vspec/spec/paper.py, in the `ANALYSES` of its torch-free `paper.py`), what `vspec analyze`
hands an analysis (`Inputs`) and what it gets back (`Figure`), and the helpers every analysis shares (`pyplot`,
`nonfinite_result`). The figures themselves are the families' (`vspec/models/<family>/analysis.py`: MSF's
projection subspaces and feature norms, Refiner's CKA curve and attention maps), each imported when it runs.
Torch-free: `vspec analyze --help` lists the analyses without importing torch."""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from ._moved import moved as _moved
from .extras import needs
from .spec import families
from .spec.paper import Analysis

__all__ = ["AnalysisError", "Figure", "InputError", "Inputs", "analyses", "nonfinite_result", "pyplot", "run"]


class AnalysisError(Exception):
    """An analysis that does not apply to this model (the reason in one line)."""


class InputError(Exception):
    """An input of `vspec analyze` that does not fit the model (its flags and why): a usage error, never skipped."""


@attrs.frozen
class Inputs:
    """What `vspec analyze` hands an analysis: `images(count, size)`, an iterator over `count` batches of `size`
    images made when asked for (the same for every call); `batch_size`, this analysis's; `batches`, `blocks`,
    `heads` as given (None: the analysis's default); a text body's `sentence` (input_ids (1, L)) and its tokens
    (`labels`), or None."""

    images: Callable[[int, int], Iterator[Any]]
    batch_size: int
    batches: int = 1
    blocks: list[int] | None = None
    heads: list[int] | None = None
    sentence: Any = None
    labels: list[str] | None = None


@attrs.frozen
class Figure:
    """An analysis's outcome: `result`, the JSON's fields; `plot(path, title)`, which writes the PNG; `nonfinite`,
    where a value it computed is NaN or infinite (`nonfinite_result`), or None."""

    result: dict[str, Any]
    plot: Callable[[Path, str], None]
    nonfinite: str | None = None


def analyses() -> dict[str, Analysis]:
    """Every family's analyses by name (the `ANALYSES` of each family package's torch-free `paper.py`), in the
    order the families load; two families naming one analysis is an error."""
    return families.paper_tables("ANALYSES")


def run(name: str, model: Any, inputs: Inputs) -> Figure:
    """The analysis `name` of `model` on `inputs`: its function imported and called.

    Args:
        name: the analysis' name (a key of `analyses()`).
        model: the model analysed (built, with its weights).
        inputs: the batch it is analysed on.
    """
    module, _, attribute = analyses()[name].function.partition(":")
    return getattr(importlib.import_module(module), attribute)(model, inputs)


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only). MPLBACKEND is hidden while matplotlib is first
    imported: the plots never use the backend it names, and a bogus one would fail the import."""
    with needs("vspec's plots"):
        if "matplotlib" not in sys.modules:
            saved = os.environ.pop("MPLBACKEND", None)
            try:
                import matplotlib  # extra
            finally:
                if saved is not None:
                    os.environ["MPLBACKEND"] = saved
        import matplotlib  # extra

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # extra

    return plt


def nonfinite_result(result: Any, where: str = "") -> str | None:
    """Where an analysis' result (dicts, lists, floats, tensors) holds a NaN or an infinity, as a path such as
    `F[3]` or `[0].before`, or None. (A null entropy is no such value: a map whose rows are not
    distributions.)

    Args:
        result: the analysis' result.
        where: the path of `result` within the whole ("": the top).
    """
    if isinstance(result, float):
        return None if math.isfinite(result) else where or "the result"
    if "torch" in sys.modules and isinstance(result, sys.modules["torch"].Tensor):  # a tensor: torch is imported
        return None if not result.is_floating_point() or bool(result.isfinite().all()) else where or "the result"
    items = result.items() if isinstance(result, dict) else enumerate(result) if isinstance(result, list) else ()
    for key, value in items:
        if isinstance(key, str):
            path = f"{where}.{key}" if where else key
        else:
            path = f"{where}[{key}]"
        found = nonfinite_result(value, path)
        if found is not None:
            return found
    return None


def __getattr__(name: str):  # the papers' figures that were here (vspec/_moved.py)
    return _moved(__name__, name)
