"""Loading a renamed state dict with every key and shape accounted for, and reading a released
constructor's arguments with every one accounted for (honoured or refused by name, never ignored)."""

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from .. import spec as S
from ..ops import sincos_1d


class ConversionError(ValueError):
    """A checkpoint that does not fit the spec; the message lists what does not match."""


class ConversionNote(UserWarning):
    """Something a converted model does differently from the released one, on purpose (a warning)."""


# a timm-0.3-style isotropic body (blocks.i with mlp, a `head` Linear) -> vspec's one stage and class-token head
ISOTROPIC_BODY = [
    (r"^blocks\.(\d+)\.mlp\.", r"stages.0.blocks.\1.ffn."),
    (r"^blocks\.", "stages.0.blocks."),
    (r"^head\.", "head.fc."),
]


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


REQUIRED = object()  # marks a released constructor argument that has no default


def read_arguments(family: str, config: Mapping[str, Any], known: Mapping[str, Any]) -> dict[str, Any]:
    """Every argument of a released constructor (`known`: name -> its default, or REQUIRED), defaults
    filled in. An argument the constructor does not take, or a required one left out, is an error naming
    it: a converter honours or refuses every argument, and never ignores one."""
    if not isinstance(config, Mapping):
        raise ConversionError(f"{family} config: must be a table of constructor arguments, got {type(config).__name__}")
    for key in config:
        if key not in known:
            raise ConversionError(f"{family} config: unknown argument {key!r}; the released constructor takes "
                                  f"{', '.join(known)}")
    missing = [k for k, default in known.items() if default is REQUIRED and k not in config]
    if missing:
        raise ConversionError(f"{family} config: missing {', '.join(missing)} (the released constructor has no "
                              "default for it)")
    return {**known, **config}


def refuse(family: str, rules: Sequence[tuple[bool, str]]) -> None:
    """Raise the first refused rule's reason as one line: `<family> config: <argument> ...: why`."""
    for refused, why in rules:
        if refused:
            raise ConversionError(f"{family} config: {why}")


_NUMBER = r"([0-9.]+(?:[eE][-+]?[0-9]+)?)"
_LAYER_NORM = r"(?:<class 'torch\.nn\.modules\.normalization\.LayerNorm'>|(?:torch\.)?(?:nn\.)?LayerNorm)"
_LAYER_NORM_FORMS = [re.compile(p) for p in (
    _LAYER_NORM,
    rf"{_LAYER_NORM}\(eps={_NUMBER}\)",
    rf"(?:functools\.)?partial\({_LAYER_NORM}, eps={_NUMBER}\)",
)]


def check_sinusoid(state_dict: Mapping[str, torch.Tensor], spec: S.Model) -> None:
    """A released model's stored `pos_embed` (a frozen parameter: SoT, T2T-ViT) must be the fixed 1-D sinusoid
    table over the tokens of `spec` (class token at position 0) that vspec recomputes (`pos_embed="sincos1d"`)."""
    if "pos_embed" not in state_dict:
        return
    tokens = S.embedded(spec)
    table, stored = sincos_1d(tokens.length, tokens.dim)[None], state_dict["pos_embed"]
    if tuple(stored.shape) != tuple(table.shape) or not torch.allclose(stored.float(), table, atol=1e-5):
        raise ConversionError(f"pos_embed (shape {tuple(stored.shape)}) is not the fixed 1-D sinusoid table of the "
                              f"{tokens.length} tokens this configuration has")


def layer_norm_eps(value: Any) -> float | None:
    """The eps of a `norm_layer` argument that is torch's LayerNorm: the class itself (eps 1e-5, torch's
    default), `partial(LayerNorm, eps=...)`, or either written out as text, as configs store them
    ("<class 'torch.nn.modules.normalization.LayerNorm'>", "LayerNorm(eps=1e-6)",
    "functools.partial(<class '...LayerNorm'>, eps=1e-06)"). None for anything else."""
    if value is nn.LayerNorm:
        return 1e-5
    if isinstance(value, functools.partial):
        if value.func is nn.LayerNorm and not value.args and set(value.keywords) <= {"eps"}:
            return float(value.keywords.get("eps", 1e-5))
        return None
    if not isinstance(value, str):
        return None
    for form in _LAYER_NORM_FORMS:
        match = form.fullmatch(value.strip())
        if match:
            return float(match[1]) if match.groups() else 1e-5
    return None


_GELU = re.compile(r"<class 'torch\.nn\.modules\.activation\.GELU'>"
                   r"|(?:torch\.)?(?:nn\.)?GELU(?:\(approximate='none'\))?")


def is_gelu(value: Any) -> bool:
    """Whether an `act_layer` argument is torch's exact (erf) GELU: the class, or its text."""
    return value is nn.GELU or (isinstance(value, str) and _GELU.fullmatch(value.strip()) is not None)
