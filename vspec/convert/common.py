"""The converters' shared machinery: key rules (`renamer`), loading a renamed state dict with every key and shape
accounted for (`load_mapped`), reading a released constructor's arguments with every one accounted for (honoured
or refused by name, never ignored: `read_arguments`, `refuse`), the readers of the values configs store
(`layer_norm_eps`, `is_gelu`, `check_sinusoid`), and the ViT block the releases share (`released_block`, with the
one rule for `qk_scale`: `attention_scale`). A released model's converter is a `vspec.convert.Released`."""

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import torch
from torch import nn

from .. import spec as specs
from ..ops import sincos_1d
from ..spec.errors import show
from ..spec.serialize import first_difference

__all__ = ["Alias", "ConversionError", "ConversionNote", "ISOTROPIC_BODY", "REQUIRED", "Rule", "attention_scale",
           "canonical", "check_sinusoid", "exported_state", "is_gelu", "layer_norm_eps", "load_mapped",
           "qk_scale_refusal", "read_arguments", "refuse", "refuse_difference", "released_block", "renamer", "side",
           "spec_and_state"]


class ConversionError(ValueError):
    """A checkpoint that does not fit the spec; the message lists what does not match."""


class ConversionNote(UserWarning):
    """Something a converted model does differently from the released one, on purpose (a warning)."""


# a key rule: (regex, replacement); the replacement may be a function of the match, or None to drop the key
Rule = tuple[str, "str | Callable[[re.Match], str] | None"]

# a timm-0.3-style isotropic body (blocks.i with mlp, a `head` Linear) -> vspec's one stage and class-token head
ISOTROPIC_BODY = [
    (r"^blocks\.(\d+)\.mlp\.", r"stages.0.blocks.\1.ffn."),
    (r"^blocks\.", "stages.0.blocks."),
    (r"^head\.", "head.fc."),
]


def renamer(rules: Sequence[Rule]) -> Callable[[str], str | None]:
    """A key renamer applying the first matching rule (None for a rule that drops its keys: a table vspec
    recomputes, a weight the model leaves out); other keys keep their name.

    Args:
        rules: (regex, replacement or None) pairs, tried in order.
    """
    compiled = [(re.compile(pattern), replacement) for pattern, replacement in rules]

    def rename(key: str) -> str | None:
        for pattern, replacement in compiled:
            if replacement is None:
                if pattern.search(key):
                    return None
                continue
            new, n = pattern.subn(replacement, key)
            if n:
                return new
        return key

    return rename


def _listing(keys: list[str], limit: int = 6) -> str:
    more = f", ... ({len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def load_mapped(model: nn.Module, state_dict: Mapping[str, torch.Tensor],
                rename: Callable[[str], str | None], *, skip: str | None = None) -> nn.Module:
    """Load `state_dict` into `model` after renaming its keys (`rename` returns None to drop a key).

    Every model entry must be filled with a tensor of the same shape, and every checkpoint entry must
    be used, so a wrong spec or a wrong mapping fails loudly instead of leaving random weights. `skip`: a prefix
    of the model's names (a fresh head, "head.") that is neither filled nor required; checkpoint entries that
    rename into it are left out.

    Args:
        model: the vspec model filled in place (and returned).
        state_dict: the checkpoint's weights under its own names.
        rename: a checkpoint key -> the model's key, or None to drop it.
        skip: a prefix of the model's keys left as built; None: every key is filled.
    """
    target = model.state_dict()
    mapped: dict[str, torch.Tensor] = {}
    unused = []
    for key, value in state_dict.items():
        new = rename(key)
        if new is None or (skip and new.startswith(skip)):
            continue
        if new not in target:
            unused.append(key)
            continue
        if tuple(value.shape) != tuple(target[new].shape):
            raise ConversionError(f"{key} -> {new}: checkpoint shape {tuple(value.shape)} does not fit the "
                                  f"spec's {tuple(target[new].shape)}")
        if target[new].is_floating_point() and not value.is_floating_point() or value.is_complex():
            raise ConversionError(f"{key}: stored as {str(value.dtype).removeprefix('torch.')}, the model's {new} "
                                  f"is {str(target[new].dtype).removeprefix('torch.')}: not floating-point weights")
        mapped[new] = value
    missing = [k for k in target if k not in mapped and not (skip and k.startswith(skip))]
    if unused or missing:
        raise ConversionError("checkpoint does not fit the spec: "
                              + "; ".join(part for part in (
                                  f"unused checkpoint keys: {_listing(unused)}" if unused else "",
                                  f"spec keys not in the checkpoint: {_listing(missing)}" if missing else "")
                                  if part))
    model.load_state_dict(mapped, strict=not skip)
    return model


def exported_state(target: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor],
                   source: Callable[[str], tuple[str, Callable[[torch.Tensor], torch.Tensor]] | None],
                   library: str) -> dict[str, torch.Tensor]:
    """`load_mapped`'s inverse: the state dict of another library's model whose entries `target` lists (its names
    and shapes: the model built on the meta device), each filled from vspec's `state` by `source(name)`: (the vspec
    name, what is taken of that tensor: a third, a transpose), or None for an entry the library makes itself.
    Strict: every entry filled with its shape and every vspec weight used, else a ConversionError lists what is
    left. The tensors are contiguous copies on the CPU (a file holds each once; meta tensors stay, to check shapes).

    Args:
        target: the other library's state dict (names and shapes).
        state: vspec's state dict.
        source: the other library's name -> (vspec's name, the transform of its tensor), or None.
        library: the other library's name, for the messages.
    """
    out: dict[str, torch.Tensor] = {}
    used, missing = set(), []
    for key, like in target.items():
        found = source(key)
        if found is None:
            continue
        name, take = found
        if name not in state:
            missing.append(f"{key} ({name})")
            continue
        value = take(state[name].detach())
        if tuple(value.shape) != tuple(like.shape):
            raise ConversionError(f"{name} -> {key}: shape {tuple(value.shape)} does not fit {library}'s "
                                  f"{tuple(like.shape)}")
        out[key] = value if value.is_meta else value.to("cpu", copy=True).contiguous()
        used.add(name)
    unused = [k for k in state if k not in used]
    if unused or missing:
        raise ConversionError(f"the model does not fit {library}'s: " + "; ".join(part for part in (
            f"weights with no place there: {_listing(unused)}" if unused else "",
            f"its weights not in the model: {_listing(missing)}" if missing else "") if part))
    return out


def spec_and_state(model: Any) -> tuple[specs.Model, dict[str, torch.Tensor], dict[str, Any]]:
    """(spec, state dict, timm's pretrained_cfg or {}) of a vspec model, or of a (spec, state dict) pair.

    Args:
        model: a vspec model, or a (spec, state dict) pair.
    """
    if isinstance(model, nn.Module) and isinstance(getattr(model, "spec", None), specs.Model):
        return model.spec, model.state_dict(), dict(getattr(model, "pretrained_cfg", None) or {})
    if (isinstance(model, tuple) and len(model) == 2 and isinstance(model[0], specs.Model)
            and isinstance(model[1], Mapping)):
        return model[0], dict(model[1]), {}
    raise ConversionError(f"a vspec model or a (spec, state_dict) pair, got {type(model).__name__}")


def canonical(spec: specs.Model) -> specs.Model:
    """`spec` with what does not change the model it builds spelt one way, so that two specs of one model compare
    equal: the initialisation (the weights are given), an MLP's width as `hidden` (its ratio the default), its
    hidden dropout None as `drop`, an attention's head_dim of dim / heads as None, a stack of one block listed as
    that block.

    Args:
        spec: the spec to respell.
    """
    ratio = attrs.fields(specs.MLP).ratio.default

    def block(b: Any, dim: int) -> Any:
        a, f = b.attention, b.ffn
        if getattr(a, "head_dim", None) is not None and a.heads * a.head_dim == dim:
            a = attrs.evolve(a, head_dim=None)
        if isinstance(f, specs.MLP):
            f = attrs.evolve(f, hidden=f.hidden_dim(dim), ratio=ratio,
                             hidden_drop=f.drop if f.hidden_drop is None else f.hidden_drop)
        return attrs.evolve(b, attention=a, ffn=f)

    stages = []
    for stage in spec.stages:
        blocks = [block(b, stage.dim) for b in stage.blocks]
        stages.append(attrs.evolve(stage, block=blocks[0] if blocks.count(blocks[0]) == len(blocks) else blocks))
    return attrs.evolve(spec, stages=stages, init="timm")


def _kind_name(tag: Any) -> str:
    """A kind's tag, with its family where a family's package defines it ("second_order (the sot family's)")."""
    module = getattr(specs.KINDS.get(tag), "__module__", "")
    family = module.rsplit(".", 2)[-2] if module.endswith(".spec") and not module.startswith("vspec.spec") else ""
    return f"{tag} (the {family} family's)" if family else str(tag)


def refuse_difference(library: str, ours: specs.Model, theirs: specs.Model, model: str) -> None:
    """Refuse, in one line naming the part, a spec that differs from `theirs`: the spec of what `library` builds
    (`model`, its name for it) from the configuration written for `ours`.

    Args:
        library: the other library's name, for the message.
        ours: the spec written (`canonical`).
        theirs: the spec read back from what was written (`canonical`).
        model: the library's name of the model it builds.
    """
    found = first_difference(ours, theirs)
    if found is None:
        return
    path, mine, its = found
    kind = path.rsplit(".", 1)[-1] == "kind"
    mine, its = (_kind_name(mine), _kind_name(its)) if kind else (show(mine), show(its))
    raise ConversionError(f"{path.removesuffix('.kind') if kind else path}: {mine} has no {library} equivalent "
                          f"({model} has {its})")


REQUIRED = object()  # marks a released constructor argument that has no default
Alias = str | tuple[str, Callable[[Any], Any]]  # an argument's other place: its flat name [, the value's reader]


def _leaves(tree: Mapping[str, Any], names: Sequence[str], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, value) of a config: a table opens where its path is no name itself but prefixes one (None
    there is an empty table)."""
    out = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        opens = path not in names and any(name.startswith(f"{path}.") for name in names)
        if opens and value is None:
            continue
        out += _leaves(value, names, f"{path}.") if opens and isinstance(value, Mapping) else [(path, value)]
    return out


def read_arguments(family: str, config: Mapping[str, Any], known: Mapping[str, Any],
                   aliases: Mapping[str, Alias] | None = None) -> dict[str, Any]:
    """Every argument of a released constructor (`known`: its flat name -> its default, or REQUIRED), defaults
    filled in. A dotted name ("svpn.alpha") may be given nested ({"svpn": {"alpha": ...}}); `aliases` are other
    places of an argument (a dotted path -> its flat name, or (flat name, reader of the value there)), read first.
    An argument the constructor does not take, a required one left out, or one given twice with two values is an
    error naming it: a converter honours or refuses every argument, and never ignores one.

    Args:
        family: the converter's name, for the messages.
        config: the released constructor's arguments, flat or nested.
        known: every argument's flat name -> its default, or REQUIRED.
        aliases: a dotted path -> its argument's flat name, or (flat name, reader); None: none.
    """
    if not isinstance(config, Mapping):
        raise ConversionError(f"{family} config: must be a table of constructor arguments, got {type(config).__name__}")
    aliases = aliases or {}
    leaves = _leaves(config, [*known, *aliases])
    given: dict[str, Any] = {}
    source: dict[str, str] = {}
    for path, value in sorted(leaves, key=lambda leaf: leaf[0] not in aliases):
        if path in aliases:
            alias = aliases[path]
            name, value = (alias, value) if isinstance(alias, str) else (alias[0], alias[1](value))
        elif path in known:
            name = path
        else:
            raise ConversionError(f"{family} config: unknown argument {path!r}; the released constructor takes "
                                  f"{', '.join(known)}")
        if name in given and given[name] != value:
            raise ConversionError(f"{family} config: {path} is {value!r} but {source[name]} is {given[name]!r}")
        given[name], source[name] = value, path
    missing = [k for k, default in known.items() if default is REQUIRED and k not in given]
    if missing:
        raise ConversionError(f"{family} config: missing {', '.join(missing)} (the released constructor has no "
                              "default for it)")
    return {**known, **given}


def side(value: Any) -> int | None:
    """The side of the square a released argument gives (img_size, patch_size): an int, or an equal pair's; None
    for anything else (a bool, an unequal pair), which the converter refuses.

    Args:
        value: the released argument.
    """
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def refuse(family: str, rules: Iterable[tuple[bool, str]]) -> None:
    """Raise the first refused rule's reason as one line: `<family> config: <argument> ...: why`.

    Args:
        family: the converter's name, for the message.
        rules: (refused, why) pairs, in order.
    """
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


def check_sinusoid(state_dict: Mapping[str, torch.Tensor], spec: specs.Model) -> None:
    """A released model's stored `pos_embed` (a frozen parameter: SoT, T2T-ViT) must be the fixed 1-D sinusoid
    table over the tokens of `spec` (class token at position 0) that vspec recomputes (`pos_embed="sincos1d"`).

    Args:
        state_dict: the released weights.
        spec: the converted model's spec.
    """
    if "pos_embed" not in state_dict:
        return
    tokens = specs.embedded(spec)
    table, stored = sincos_1d(tokens.length, tokens.dim)[None], state_dict["pos_embed"]
    if tuple(stored.shape) != tuple(table.shape) or not torch.allclose(stored.float(), table, atol=1e-5):
        raise ConversionError(f"pos_embed (shape {tuple(stored.shape)}) is not the fixed 1-D sinusoid table of the "
                              f"{tokens.length} tokens this configuration has")


def layer_norm_eps(value: Any) -> float | None:
    """The eps of a `norm_layer` argument that is torch's LayerNorm: the class itself (eps 1e-5, torch's
    default), `partial(LayerNorm, eps=...)`, or either written out as text, as configs store them
    ("<class 'torch.nn.modules.normalization.LayerNorm'>", "LayerNorm(eps=1e-6)",
    "functools.partial(<class '...LayerNorm'>, eps=1e-06)"). None for anything else.

    Args:
        value: a `norm_layer` argument.
    """
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
    """Whether an `act_layer` argument is torch's exact (erf) GELU: the class, or its text.

    Args:
        value: an `act_layer` argument.
    """
    return value is nn.GELU or (isinstance(value, str) and _GELU.fullmatch(value.strip()) is not None)


def qk_scale_refusal(a: Mapping[str, Any]) -> tuple[bool, str]:
    """The refusal of a released `qk_scale` that is not a number (or None): for a `Released.refusals` list.

    Args:
        a: the released constructor's arguments (`read_arguments`).
    """
    qk = a["qk_scale"]
    return (qk is not None and (isinstance(qk, bool) or not isinstance(qk, (int, float))),
            f"qk_scale {qk!r}: a number, or None for head_dim ** -0.5")


def attention_scale(qk_scale: float | None) -> float | None:
    """The attention scale of a released `qk_scale`, by the expression of every release vspec converts (SoT,
    T2T-ViT, iRPE, Conformer and Refiner all write `self.scale = qk_scale or head_dim ** -0.5`): None and 0 give
    head_dim ** -0.5 (None, the spec's default), any other number is the scale.

    Args:
        qk_scale: the released argument.
    """
    return float(qk_scale) if qk_scale else None


def released_block(a: Mapping[str, Any], *, attention: type = specs.MHSA, block: type = specs.Block,
                   ffn: Any = None, norm: specs.Norm | None = None, **fields: Any) -> Any:
    """The ViT block of timm 0.3 that the releases build from their constructor's arguments `a`: `attention` with
    `num_heads` heads, `qkv_bias` and the scale of `qk_scale` (`attention_scale`; a release without the argument,
    DHVT, has the default), `fields` its other fields; `ffn` (default an MLP of `mlp_ratio`); `norm` (default
    LayerNorm of `norm_layer`'s eps; a release without the argument, Conformer, has the block's default).

    Args:
        a: the released constructor's arguments (`read_arguments`).
        attention: the attention kind's class.
        block: the block kind's class.
        ffn: the feed-forward spec; None: an MLP of `mlp_ratio`.
        norm: the block's norm; None: as above.
        **fields: the attention's other fields.
    """
    scale = {"scale": attention_scale(a["qk_scale"])} if "qk_scale" in a else {}
    if norm is None and "norm_layer" in a:
        norm = specs.Norm(eps=layer_norm_eps(a["norm_layer"]))
    return block(attention=attention(heads=a["num_heads"], qkv_bias=bool(a["qkv_bias"]), **scale, **fields),
                 ffn=ffn if ffn is not None else specs.MLP(ratio=float(a["mlp_ratio"])),
                 **({"norm": norm} if norm is not None else {}))
