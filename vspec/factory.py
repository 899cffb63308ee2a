"""`create_model`: timm's factory call for vspec models, from a preset name, a spec file or a checkpoint.

    create_model("deit_tiny", num_classes=10, img_size=64, **{"block.attention.heads": 6})
    create_model("runs/x/best.pt", num_classes=5)            # body weights kept, a new classifier
    create_model("swin_tiny", features_only=True, out_indices=(1, 2, 3))   # a list of NCHW maps
    create_model("deit_tiny", pretrained=True, num_classes=10)  # published weights, new classes

A preset is `specs/<name>.py` of the repository, installed with the package as `vspec/presets/<name>.py` (a link
to `specs/` in the repository, its files in the wheel), or of a folder on the `VSPEC_SPECS` search path
(`os.pathsep`-separated, searched first), or of a family's preset folder (found by vspec.spec.catalogue).
Overrides are dotted spec keys as `vspec build --set` takes them (`vspec.spec.override`). `features_only=True` wraps the
model in `FeatureModel` (timm's FeatureGetterNet), whose `feature_info` is timm's `FeatureInfo`: timm (the
`vspec[train]` extra) is imported then, and only then. `register_timm()` makes every preset a timm
entrypoint `vspec_<name>`, opt-in (nothing is registered on import).
"""

import inspect
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import attrs
import torch
from torch import nn

from ._moved import moved as _moved
from .compiler import build
from .extras import needs
from .spec import Model, SpecError, from_json, load_spec, load_weights_table, override
from .spec.catalogue import (  # noqa: F401 - also here
    PRESETS,
    preset_dirs,
    preset_file,
    preset_path,
    preset_ref,
    presets,
    resolve_name,
)
from .spec.errors import cause, eps_problem
from .spec.weights import PublishedWeights, inputs_cfg, requested
from .weights import published
from .weights.cache import WeightsUnavailable
from .weights.checkpoint import load_saved, load_weights, timm_cfg
from .weights.loading import load_checkpoint
from .weights.resample import resample_state

__all__ = ["FeatureModel", "create_model", "register_timm"]
_TIMM_PREFIX = "vspec_"


def _source(name_or_path: str | Path) -> tuple[Model, dict | None, dict | None]:
    """(spec, state_dict or None, the pretrained_cfg it records or None) of a preset name (or `name.tag`: the
    tag must be one of its weights'), spec file, checkpoint or model folder (`resolve_name`: a Path's text may
    name a preset; what is no path is a preset's name)."""
    try:
        named = resolve_name(str(name_or_path), saved=True, unknown="preset")
    except OSError as e:  # a name too long for the file system is no preset either
        raise SpecError("", f"{str(name_or_path)[:80]!r}{'...' if len(str(name_or_path)) > 80 else ''}: no "
                            f"preset, and no path ({e.strerror})") from None
    if named.kind == "saved":
        ckpt = load_checkpoint(named.path)  # a .pt file or a model folder
        return from_json(ckpt["spec"]), ckpt["state_dict"], ckpt.get("pretrained_cfg")
    return load_spec(named.path if named.kind == "file" else preset_file(named.name, named.tag)), None, None


def create_model(name_or_path: str | Path, pretrained: bool | str = False, features_only: bool = False,
                 out_indices: int | Sequence[int] | None = None, img_size: int | Sequence[int] | None = None,
                 num_classes: int | None = None, **overrides: Any) -> nn.Module:
    """A vspec model as `timm.create_model` makes one.

    A preset is `specs/<name>.py` (installed as `vspec/presets`); timm's `name.tag` names its weights too:
    `create_model("deit_tiny.fb_in1k", pretrained=True)`. A preset's published weights are fetched, converted and
    cached by `vspec.weights.published`; a path's weights load whatever `pretrained` says (as timm's
    `checkpoint_path`); True for a .json / .toml spec is refused. For weights, a new num_classes loads everything
    but the classifier, which starts fresh (timm's pretrained model with other classes), and a new img_size
    resamples the weights (`vspec.weights.resample`). timm's standard keywords (`_TIMM_KWARGS`: drop_rate,
    drop_path_rate, ..., checkpoint_path) are taken as timm's train.py passes them, None meaning not given
    (`_timm_spec`, `_timm_model`). The model's `pretrained_cfg` is its weights' inputs, else the preprocessing its
    preset's weights declare, else vspec's default (marked: `INPUTS`).

    Args:
        name_or_path: a preset name, a spec file (.py / .json / .toml), a checkpoint (.pt / .pth) or a model folder.
        pretrained: True (a preset's default published weights) or a tag of its `WEIGHTS` (`vspec weights`).
        features_only: a `FeatureModel` giving the maps that its `feature_info` lists (timm's FeatureGetterNet).
        out_indices: the blocks or stages it gives (timm's default: the last 3 blocks, or every stage).
        img_size: the image size, an int or (height, width); weights are resampled to it.
        num_classes: the classes of the classifier; a new number starts a fresh one.
        **overrides: dotted spec keys and their values (`**{"block.attention.heads": 6}`), and timm's keywords.

    Returns:
        The model (a `vspec.nn.model.Transformer`), or its `FeatureModel` with `features_only`.
    """
    timm_kw = {k: v for k in _TIMM_KWARGS if k in overrides and (v := overrides.pop(k)) is not None}
    if requested(pretrained) and _declares_weights(name_or_path):
        model = _timm_model(_pretrained(name_or_path, pretrained, img_size, num_classes, overrides, timm_kw), timm_kw)
        return FeatureModel(model, out_indices) if features_only else model
    spec, weights, cfg = _source(name_or_path)
    if pretrained and weights is None:
        raise SpecError("", f"pretrained={pretrained!r}: {str(name_or_path)!r} is a .json / .toml spec; give a preset "
                            "with published weights (`vspec weights`), a checkpoint (.pt) or a model folder")
    if img_size is not None:
        overrides["img_size"] = [img_size, img_size] if isinstance(img_size, int) else list(img_size)
    if num_classes is not None and weights is None:
        overrides["num_classes"] = num_classes
    new = _timm_spec(override(spec, overrides) if overrides else spec, timm_kw)

    if weights is None:
        model = build(new)
        if _declares_weights(name_or_path):  # a preset: the inputs its weights declare, marked as not held
            model.pretrained_cfg = inputs_cfg(new, *_declared(name_or_path))
    else:
        if new.img_size != spec.img_size:  # the position tables resampled (vspec.weights.resample)
            weights = resample_state(weights, spec, new)
        model = build(new)
        load_weights(model, weights, name_or_path)
        if num_classes is not None and num_classes != new.num_classes:
            model.reset_classifier(num_classes)
        if cfg:  # the inputs the weights were made with, at the model's own size and classes
            model.pretrained_cfg = {**timm_cfg(cfg), "num_classes": model.num_classes,
                                    **({"input_size": (new.in_chans, *new.img_size)} if "input_size" in cfg else {})}
    model = _timm_model(model, timm_kw)
    if features_only:
        return FeatureModel(model, out_indices)
    return model


def _declares_weights(name_or_path: str | Path) -> bool:
    """A preset name or a .py spec file: where published weights are declared (WEIGHTS beside SPEC)."""
    return Path(name_or_path).suffix == ".py" or resolve_name(name_or_path).kind == "preset"


def _declared(name_or_path: str | Path) -> tuple[str, str, PublishedWeights] | tuple[()]:
    """(name, tag, entry) of the weights a preset (`name.tag`: that tag's) declares, () where it declares none."""
    name, file, tag = published.locate(name_or_path)
    table = load_weights_table(file)
    tag = tag if tag in table else next(iter(table), None)
    return () if tag is None else (name, tag, table[tag])


def _pretrained(name_or_path: str | Path, pretrained: bool | str, img_size: Any, num_classes: int | None,
                overrides: dict[str, Any], timm_kw: dict[str, Any]) -> nn.Module:
    """A preset with its published weights (`vspec.weights.published`): the preset's spec (num_classes, img_size,
    overrides and timm's keywords applied) built, the published body loaded, the head's parts that fit loaded too,
    the rest fresh."""
    if img_size is not None:
        overrides["img_size"] = [img_size, img_size] if isinstance(img_size, int) else list(img_size)
    if num_classes is not None:
        overrides["num_classes"] = num_classes
    got = published.published(name_or_path, pretrained)  # first: weights that cannot be had are said before any build
    model = build(_timm_spec(override(got.preset, overrides) if overrides else got.preset, timm_kw))
    entry, _ = published.load_into(model, got)
    if not overrides and "in_chans" not in timm_kw and published.params(model) != entry.params:
        raise WeightsUnavailable(f"{name_or_path}: the model has {published.params(model):,} parameters, its weights "
                                   f"entry declares {entry.params:,}")
    return model


# timm's standard create_model keywords beside pretrained, num_classes and img_size (its train.py passes them all)
_TIMM_KWARGS = ("global_pool", "in_chans", "drop_rate", "drop_path_rate", "proj_drop_rate", "attn_drop_rate",
               "drop_block_rate", "bn_momentum", "bn_eps", "scriptable", "checkpoint_path")
# timm's keyword -> the field it sets in every component of the role that has it (the first listed must be found)
_DROPOUTS = {"drop_rate": (("head", "drop"),), "attn_drop_rate": (("attention", "attn_drop"),),
            "proj_drop_rate": (("attention", "proj_drop"), ("ffn", "drop"))}
_POOLS = {"token": "class_token", "avg": "gap"}  # timm's global_pool -> the head kind that pools so


def _timm_spec(spec: Model, timm_kw: dict[str, Any]) -> Model:
    """`spec` with timm's keywords applied: global_pool ("token": the class-token head, "avg": the average-pooling
    head), in_chans, drop_path_rate -> the stochastic depth (`drop_path`), drop_rate -> the head's dropout (`drop`,
    a nested head's too), attn_drop_rate / proj_drop_rate -> the attentions' `attn_drop` / `proj_drop` (and
    proj_drop_rate the FFNs' `drop`, as timm's blocks) where the kinds have them. A rate of 0 asks for nothing; a
    value the model cannot honour (a rate no component takes, DropBlock, another pooling) is a one-line SpecError
    naming the keyword."""
    for key, value in timm_kw.items():
        try:
            if key == "global_pool":
                spec = _pool(spec, value)
            elif key in ("in_chans", "drop_path_rate"):
                spec = override(spec, {key.removesuffix("_rate"): value})
            elif key == "drop_block_rate" and value != 0:
                raise SpecError("", "vspec models have no DropBlock (a CNN's); use drop_path_rate")
            elif key in _DROPOUTS:
                (role, first), *_ = _DROPOUTS[key]
                found = {f"{path}.{name}": value for role_, name in _DROPOUTS[key]
                         for path, kind in _components(spec, role_) if name in attrs.fields_dict(type(kind))}
                if value != 0 and not any(k.endswith(f".{first}") for k in found):
                    kinds = sorted({kind.kind for _, kind in _components(spec, role)})
                    raise SpecError("", f"no {role} of the model has that dropout ({', '.join(kinds) or 'none'})")
                spec = override(spec, found) if found else spec
        except SpecError as e:
            raise SpecError(key, f"{value!r}: {e}") from None
    return spec


def _components(spec: Model, role: str) -> list[tuple[str, Any]]:
    """(path, kind) of every component of `role` (a head's nested heads too, e.g. Conformer's token head)."""
    out = [(path, kind) for path, kind in spec.kinds() if kind.role == role]
    for path, kind in list(out) if role == "head" else ():
        out += [(f"{path}.{f.name}", v) for f in attrs.fields(type(kind))
                if getattr(v := getattr(kind, f.name), "role", None) == "head"]
    return out


def _pool(spec: Model, value: Any) -> Model:
    """The spec whose head pools as timm's `global_pool` says: the head as it is where it does already; a plain
    class-token or average-pooling head switched to the other; anything else refused."""
    kind = _POOLS.get(value) if isinstance(value, str) else None
    head = spec.head
    if kind == head.kind:
        return spec
    extras = [f.name for f in attrs.fields(type(head)) if f.name != "drop" and getattr(head, f.name) != f.default]
    if kind is None or head.kind not in _POOLS.values() or extras:
        held = f" ({', '.join(extras)})" if extras else ""
        raise SpecError("", f"the model pools with its {head.kind} head{held}; vspec switches only a plain "
                            "class_token head ('token') and gap head ('avg')")
    return override(spec, {"head.kind": kind})


def _timm_model(model: nn.Module, timm_kw: dict[str, Any]) -> nn.Module:
    """The built model with timm's other keywords: bn_momentum / bn_eps set on every BatchNorm (as timm's models
    take them; the spec keeps its own eps), checkpoint_path's weights loaded (a vspec checkpoint or model folder,
    or a folder of weights alone, as Trainer.save_model writes one: read as the model's; every key checked; timm's
    "" is none), scriptable refused (vspec models are not TorchScript: torch.compile or
    torch.export them)."""
    if timm_kw.get("scriptable"):
        raise SpecError("scriptable", f"{timm_kw['scriptable']!r}: vspec models are not TorchScript-scriptable; use "
                                      "torch.compile, or torch.export (`vspec export`)")
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for key, attr in (("bn_momentum", "momentum"), ("bn_eps", "eps")):
        if key not in timm_kw:
            continue
        value = timm_kw[key]
        if not norms:
            raise SpecError(key, f"{value!r}: the model has no BatchNorm")
        if key == "bn_eps" and (problem := eps_problem(value)):  # the rule of every norm's eps in a spec
            raise SpecError(key, f"{value!r}: a BatchNorm eps {problem}")
        if key == "bn_momentum" and (isinstance(value, bool) or not isinstance(value, (int, float))
                                     or not 0 <= value <= 1):  # NaN too
            raise SpecError(key, f"{value!r}: a BatchNorm momentum is a finite number in [0, 1]")
        for m in norms:
            setattr(m, attr, float(value))
    if timm_kw.get("checkpoint_path"):
        path = timm_kw["checkpoint_path"]
        if not isinstance(path, (str, os.PathLike)):
            raise SpecError("checkpoint_path", f"{path!r}: a path to a vspec checkpoint (.pt) or model folder")
        load_saved(model, load_checkpoint(path, spec=model.spec), path)  # spec: a folder of weights alone's (Trainer's)
    return model


def _timm_source(name: str, pretrained: Any, cfg: Any, overlay: dict | None, cache_dir: Any) -> str:
    """The preset a timm entrypoint call names: timm hands the tag of `vspec_<name>.<tag>` over as `pretrained_cfg`
    (`name.tag`, checked as create_model checks it). Weights from timm's own sources are refused where `pretrained`
    asks for weights (a pretrained_cfg that is no tag, an overlay's file / url / hub id, cache_dir): a preset's come
    from its WEIGHTS, cached under VSPEC_CACHE; other weights load through checkpoint_path."""
    if cfg is not None and not isinstance(cfg, str):
        raise SpecError("pretrained_cfg", f"{type(cfg).__name__}: a vspec preset takes a tag of its weights "
                                          "(`vspec weights`), not timm's config")
    sources = [k for k in ("file", "url", "hf_hub_id", "state_dict") if (overlay or {}).get(k)]
    if pretrained and (sources or cache_dir is not None):
        given = f"pretrained_cfg_overlay {sources[0]}" if sources else "cache_dir"
        raise SpecError("", f"{given}: a vspec preset's weights are its published ones (a tag, `vspec weights`; "
                            "cached under VSPEC_CACHE); load others with checkpoint_path (timm's --initial-checkpoint)")
    return f"{name}.{cfg}" if cfg else name


def _timm_kept(caller: FrameType | None) -> dict[str, Any]:
    """The keywords timm's create_model keeps from its entrypoint: `scriptable`, which it sets as its layer config
    (`timm.layers.is_scriptable()`), and `checkpoint_path`, which it loads itself after the entrypoint returns (read
    from its frame, the entrypoint's `caller`, where it is create_model's own)."""
    from timm.layers import is_scriptable  # extra: vspec[train]; only timm calls the entrypoints
    from timm.models import create_model as timm_create_model  # extra

    kept = {"scriptable": is_scriptable() or None}
    if caller is not None and caller.f_code is inspect.unwrap(timm_create_model).__code__:
        kept["checkpoint_path"] = caller.f_locals.get("checkpoint_path")
    return kept


_REWRITE = "vspec.create_model loads it, and vspec.save(vspec.load(path), 'new.pt') writes one timm's loader reads"


class _Taken:
    """A stand-in for the model in timm's `load_checkpoint`: keeps the state dict it is handed."""

    state: Any = None

    def load_state_dict(self, state_dict: Any, strict: bool = True) -> None:
        self.state = state_dict


def _timm_rereads(model: nn.Module, path: Any) -> None:
    """timm's create_model loads `path` again once its entrypoint has returned, with its own loader
    (`timm.models.load_checkpoint`: no checksum and no check of the values; `state_dict_ema` or `model_ema` before
    `state_dict`; keys as written, before vspec's upgrade of an earlier format; no folder, a .npz / .npy name read
    as numpy's): refused in one line unless that loader hands over the weights the model holds, which vspec's
    checks passed and loaded."""
    from timm.models import load_checkpoint as timm_load  # extra

    if Path(path).is_dir():
        raise SpecError("checkpoint_path", f"{path}: a model folder, which timm's loader (run after vspec's) cannot "
                                           "read; give timm a checkpoint file, or vspec.create_model the folder")
    own, taken = model.state_dict(), _Taken()
    try:
        timm_load(taken, path)
        got = taken.state
        same = isinstance(got, dict) and got.keys() == own.keys() and all(
            isinstance(t := got[k], torch.Tensor) and t.shape == v.shape and torch.equal(t.to(v.dtype), v)
            for k, v in own.items())
    except Exception as e:  # noqa: BLE001 - whatever timm's loader raises, said in one line
        raise SpecError("checkpoint_path", f"{path}: timm's loader, which reads it again after vspec's checks, "
                                           f"cannot ({cause(e)}); {_REWRITE}") from None
    if not same:
        raise SpecError("checkpoint_path", f"{path}: timm's loader, which reads it again after vspec's checks, "
                                           "would load other weights than the model's (e.g. an EMA entry, an "
                                           f"earlier vspec's keys); {_REWRITE}")


class FeatureModel(nn.Module):
    """timm's FeatureGetterNet: `forward(x)` is `model.forward_intermediates(x, out_indices, norm,
    intermediates_only=True)`, a list of (B, C, H / r, W / r) maps for images (of NLC tokens for a text body).
    The model is pruned first (`prune_intermediate_layers`: blocks or stages past the last index, the head,
    and the final norm unless `norm`). `feature_info` is timm's `FeatureInfo` (timm imported here)."""

    def __init__(self, model: nn.Module, out_indices: int | Sequence[int] | None = None, norm: bool = False):
        super().__init__()
        with needs("create_model(features_only=True)"):
            from timm.models._features import FeatureInfo  # extra: vspec[train]; only features_only needs it

        if out_indices is None:  # timm: the last 3 blocks of a ViT, every stage of a hierarchical model
            out_indices = min(3, len(model.feature_info)) if len(model.layout) == 1 else len(model.feature_info)
        # in forward order, once each: as forward_intermediates gives them
        self.out_indices = sorted(set(model.prune_intermediate_layers(out_indices, prune_norm=not norm)))
        self.feature_info = FeatureInfo([dict(f) for f in model.feature_info], tuple(self.out_indices))
        self.model, self.norm = model, norm

    @property
    def pretrained_cfg(self) -> dict:
        """The model's (as timm's feature wrappers keep it)."""
        return self.model.pretrained_cfg

    default_cfg = pretrained_cfg

    def forward(self, x, **kwargs) -> list:
        """The feature maps of `out_indices` (`forward_intermediates`, intermediates only)."""
        return self.model.forward_intermediates(x, self.out_indices, norm=self.norm, intermediates_only=True,
                                                **kwargs)


def register_timm(prefix: str = _TIMM_PREFIX) -> list[str]:
    """Make every preset a timm entrypoint `<prefix><name>` (timm's names take no `/`), so that
    `timm.create_model("vspec_deit_tiny", num_classes=10, features_only=True)` calls `create_model`;
    returns the names. timm keeps `scriptable` and `checkpoint_path` from its entrypoints: each reads them from
    timm's call (`_timm_kept`), and checks that timm's own loading of checkpoint_path, after it, loads what vspec's
    checks passed (`_timm_rereads`). Opt-in: importing vspec registers nothing. Safe to call again.

    Args:
        prefix: what each entrypoint's name starts with.
    """
    with needs("register_timm"):
        from timm.models import _registry, register_model  # extra

    names = []
    for name in presets():
        entry = f"{prefix}{name}"
        names.append(entry)
        if getattr(_registry._model_entrypoints.get(entry), "__module__", None) == __name__:
            continue  # registered by an earlier call (timm warns when a name is registered again)

        def entrypoint(pretrained: bool = False, *, _preset: str = name, pretrained_cfg: Any = None,
                       pretrained_cfg_overlay: dict | None = None, cache_dir: Any = None, **kwargs: Any) -> nn.Module:
            source = _timm_source(_preset, pretrained, pretrained_cfg, pretrained_cfg_overlay, cache_dir)
            kept = _timm_kept(sys._getframe(1))
            model = create_model(source, pretrained=pretrained, **{**kept, **kwargs})
            if kept.get("checkpoint_path"):
                _timm_rereads(model, kept["checkpoint_path"])
            return model

        entrypoint.__name__ = entrypoint.__qualname__ = entry
        entrypoint.__module__ = __name__
        register_model(entrypoint)
    return names


def __getattr__(name: str):  # CHECKPOINTS went to vspec.spec.catalogue (vspec/_moved.py)
    return _moved(__name__, name)
