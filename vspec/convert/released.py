"""A released model's converter as data. A `Released` record names what the authors' constructor takes (its
arguments with their defaults, their other places in a config, what vspec refuses), how the arguments make a vspec
spec, how the checkpoint's keys become vspec's, and what is checked or noted on the way. Each family's `convert.py`
declares its records and its `family.py` lists them (`CONVERTERS`); `vspec.convert.from_official` calls them.
"""

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from attrs import field, frozen
from torch import nn

from .. import spec as specs
from .._moved import moved as _moved
from ..compiler import build
from .common import Alias, ConversionNote, Rule, load_mapped, read_arguments, refuse, renamer

__all__ = ["Released", "StateDict"]

StateDict = Mapping[str, torch.Tensor]  # a checkpoint's tensors by key, as torch.load reads them


def _nothing(*_: Any) -> tuple:
    return ()


@frozen
class Released:
    """One released constructor, as data (a family may have several).

    name: how messages name it ("DHVT config: ...").
    arguments: the constructor's arguments under their flat names, each with its default or REQUIRED
      (`read_arguments`: a dotted name may be given nested).
    to_spec(a, weights): the vspec spec of the read arguments `a`; `weights`: the checkpoint, where there is one
      (None when a config alone is read), for a layout only the weights tell.
    refusals(a): (refused, why) pairs; the first refused one is raised as "<name> config: <why>".
    aliases: other places of an argument in a config (a dotted path -> its flat name, or (flat name, reader)).
    rules: key rules (`common.Rule`: the first match renames, None drops), or a function of the spec giving them.
    prepare(weights, spec): the checkpoint under the names the rules read (fused matrices split, ...).
    checks: functions (weights, spec) raising ConversionError where the checkpoint contradicts the spec.
    notes(a, spec, weights): what the converted model does differently on purpose, each warned as a
      ConversionNote."""

    name: str
    arguments: Mapping[str, Any]
    to_spec: Callable[[dict[str, Any], StateDict | None], specs.Model]
    refusals: Callable[[dict[str, Any]], Iterable[tuple[bool, str]]] = _nothing
    aliases: Mapping[str, Alias] = field(factory=dict)
    rules: Sequence[Rule] | Callable[[specs.Model], Sequence[Rule]] = ()
    prepare: Callable[[StateDict, specs.Model], StateDict] | None = None
    checks: Sequence[Callable[[StateDict, specs.Model], None]] = ()
    notes: Callable[[dict[str, Any], specs.Model, StateDict], Iterable[str]] = _nothing

    def read(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Every argument of `config` by its flat name, defaults filled in, refusals applied."""
        a = read_arguments(self.name, config, self.arguments, self.aliases)
        refuse(self.name, self.refusals(a))
        return a

    def spec_of(self, config: Mapping[str, Any], weights: StateDict | None = None) -> specs.Model:
        """The vspec spec of a released config (`weights`: its checkpoint, where the layout needs it)."""
        return self.to_spec(self.read(config), weights)

    def convert(self, state_dict: StateDict, config: Mapping[str, Any]) -> nn.Module:
        """The vspec model of a released config with its checkpoint loaded, every key and shape accounted for
        (`load_mapped`)."""
        a = self.read(config)
        spec = self.to_spec(a, state_dict)
        for check in self.checks:
            check(state_dict, spec)
        for note in self.notes(a, spec, state_dict):
            warnings.warn(ConversionNote(f"{self.name} config: {note}"), stacklevel=3)
        rules = self.rules(spec) if callable(self.rules) else self.rules
        weights = self.prepare(state_dict, spec) if self.prepare is not None else state_dict
        return load_mapped(build(spec), weights, renamer(rules))

    __call__ = convert


def __getattr__(name: str):  # Weights, StateDict's old name (vspec/_moved.py)
    return _moved(__name__, name)
