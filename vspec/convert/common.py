"""Loading a renamed state dict with every key and shape accounted for."""

import re
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn


class ConversionError(ValueError):
    """A checkpoint that does not fit the spec; the message lists what does not match."""


class ConversionNote(UserWarning):
    """Something a converted model does differently from the released one, on purpose (a warning)."""


def renamer(rules: Sequence[tuple[str, str]]) -> Callable[[str], str]:
    """A key renamer applying the first matching (regex, replacement) rule; other keys keep their name."""
    compiled = [(re.compile(pattern), replacement) for pattern, replacement in rules]

    def rename(key: str) -> str:
        for pattern, replacement in compiled:
            new, n = pattern.subn(replacement, key)
            if n:
                return new
        return key

    return rename


def _listing(keys: list[str], limit: int = 6) -> str:
    more = f", ... ({len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def load_mapped(model: nn.Module, state_dict: Mapping[str, torch.Tensor],
                rename: Callable[[str], str | None]) -> nn.Module:
    """Load `state_dict` into `model` after renaming its keys (`rename` returns None to drop a key).

    Every model entry must be filled with a tensor of the same shape, and every checkpoint entry must
    be used, so a wrong spec or a wrong mapping fails loudly instead of leaving random weights."""
    target = model.state_dict()
    mapped: dict[str, torch.Tensor] = {}
    unused = []
    for key, value in state_dict.items():
        new = rename(key)
        if new is None:
            continue
        if new not in target:
            unused.append(key)
            continue
        if tuple(value.shape) != tuple(target[new].shape):
            raise ConversionError(f"{key} -> {new}: checkpoint shape {tuple(value.shape)} does not fit the "
                                  f"spec's {tuple(target[new].shape)}")
        mapped[new] = value
    missing = [k for k in target if k not in mapped]
    if unused or missing:
        raise ConversionError("checkpoint does not fit the spec: "
                              + "; ".join(part for part in (
                                  f"unused checkpoint keys: {_listing(unused)}" if unused else "",
                                  f"spec keys not in the checkpoint: {_listing(missing)}" if missing else "")
                                  if part))
    model.load_state_dict(mapped)
    return model
