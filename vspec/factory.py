"""`create_model`: timm's factory call for vspec models, from a preset name, a spec file or a checkpoint.

    create_model("deit_tiny", num_classes=10, img_size=64, **{"block.attention.heads": 6})
    create_model("runs/x/best.pt", num_classes=5)            # body weights kept, a new classifier
    create_model("swin_tiny", features_only=True, out_indices=(1, 2, 3))   # a list of NCHW maps
    create_model("deit_tiny", pretrained=True, num_classes=10)  # published weights (vspec.pretrained), new classes

A preset is `specs/<name>.py` of the repository, installed with the package as `vspec/presets/<name>.py` (a link
to `specs/` in the repository, its files in the wheel), or of a folder on the `VSPEC_SPECS` search path
(`os.pathsep`-separated, searched first), or of a family's preset folder (found by vspec.spec.catalogue).
Overrides are dotted spec keys as `vspec build --set` takes them (`vspec.spec.override`). `features_only=True` wraps the
model in `FeatureModel` (timm's FeatureGetterNet), whose `feature_info` is timm's `FeatureInfo`: timm (the
`vspec[train]` extra) is imported then, and only then. `register_timm()` makes every preset a timm
entrypoint `vspec_<name>`, opt-in (nothing is registered on import).
"""

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

from . import pretrained as P
from .checkpoint import load_weights, timm_cfg
from .compiler import build
from .extras import needs
from .loading import load_checkpoint
from .resample import resample_state
from .spec import Model, SpecError, from_json, load_spec, override
from .spec.catalogue import PRESETS, preset_dirs, preset_file, preset_path, preset_ref, presets  # noqa: F401 - also here
from .spec.load import SUFFIXES
from .spec.weights import requested

CHECKPOINTS = (".pt", ".pth")
TIMM_PREFIX = "vspec_"


def _source(name_or_path: str | Path) -> tuple[Model, dict | None, dict | None]:
    """(spec, state_dict or None, the pretrained_cfg it records or None) of a preset name (or `name.tag`: the
    tag must be one of its weights'), spec file, checkpoint or model folder."""
    path = Path(name_or_path)
    try:
        folder = path.is_dir()
    except OSError as e:  # a name too long for the file system is no preset either
        raise SpecError("", f"{str(name_or_path)[:80]!r}{'...' if len(str(name_or_path)) > 80 else ''}: no "
                            f"preset, and no path ({e.strerror})") from None
    if folder or path.suffix in CHECKPOINTS:
        ckpt = load_checkpoint(path)  # a .pt file or a model folder
        return from_json(ckpt["spec"]), ckpt["state_dict"], ckpt.get("pretrained_cfg")
    if path.suffix in SUFFIXES or path.exists() or os.sep in str(name_or_path):
        return load_spec(path), None, None
    return load_spec(preset_file(*(preset_ref(str(name_or_path)) or (str(name_or_path), None)))), None, None


def create_model(name_or_path: str | Path, pretrained: bool | str = False, features_only: bool = False,
                 out_indices: int | Sequence[int] | None = None, img_size: int | Sequence[int] | None = None,
                 num_classes: int | None = None, **overrides: Any) -> nn.Module:
    """A vspec model as `timm.create_model` makes one.

    name_or_path: a preset name (`specs/<name>.py`, installed as `vspec/presets`; timm's `name.tag` names its
    weights too: `create_model("deit_tiny.fb_in1k", pretrained=True)`), a spec file (.py / .json /
    .toml), a checkpoint (.pt / .pth: its spec and weights) or a model folder. pretrained: for a preset, True
    (its default published weights) or a tag of its `WEIGHTS` (`vspec weights` lists them): fetched, converted
    and cached by `vspec.pretrained`; a path's weights load whatever `pretrained` says (as timm's
    `checkpoint_path`); True for a spec file is refused. img_size, num_classes and `overrides` (dotted spec keys,
    e.g. `**{"block.attention.heads": 6}`) change the spec; for weights, a new num_classes loads everything but
    the classifier, which starts fresh (timm's pretrained model with other classes), and a new img_size
    resamples the weights (`resample`). features_only: a `FeatureModel` giving the `feature_info` entries at
    `out_indices` (timm's defaults: the last 3 blocks of a one-stage model, every stage of a hierarchical one).
    """
    if requested(pretrained) and _declares_weights(name_or_path):
        model = _pretrained(name_or_path, pretrained, img_size, num_classes, overrides)
        return FeatureModel(model, out_indices) if features_only else model
    spec, weights, cfg = _source(name_or_path)
    if pretrained and weights is None:
        raise SpecError("", f"pretrained={pretrained!r}: {str(name_or_path)!r} is a .json / .toml spec; give a preset "
                            "with published weights (`vspec weights`), a checkpoint (.pt) or a model folder")
    if img_size is not None:
        overrides["img_size"] = [img_size, img_size] if isinstance(img_size, int) else list(img_size)
    if num_classes is not None and weights is None:
        overrides["num_classes"] = num_classes
    new = override(spec, overrides) if overrides else spec

    if weights is None:
        model = build(new)
    else:
        if new.img_size != spec.img_size:  # the position tables resampled (vspec.resample)
            weights = resample_state(weights, spec, new)
        model = build(new)
        load_weights(model, weights, name_or_path)
        if num_classes is not None and num_classes != new.num_classes:
            model.reset_classifier(num_classes)
        if cfg:  # the inputs the weights were made with, at the model's own size and classes
            model.pretrained_cfg = {**timm_cfg(cfg), "num_classes": model.num_classes,
                                    **({"input_size": (new.in_chans, *new.img_size)} if "input_size" in cfg else {})}
    if features_only:
        return FeatureModel(model, out_indices)
    return model


def _declares_weights(name_or_path: str | Path) -> bool:
    """A preset name or a .py spec file: where published weights are declared (WEIGHTS beside SPEC)."""
    return Path(name_or_path).suffix == ".py" or (not isinstance(name_or_path, Path) and
                                                  preset_ref(name_or_path) is not None)


def _pretrained(name_or_path: str | Path, pretrained: bool | str, img_size: Any, num_classes: int | None,
                overrides: dict[str, Any]) -> nn.Module:
    """A preset with its published weights (`vspec.pretrained`): the preset's spec (num_classes, img_size and
    overrides applied) built, the published body loaded, the head's parts that fit loaded too, the rest fresh."""
    if img_size is not None:
        overrides["img_size"] = [img_size, img_size] if isinstance(img_size, int) else list(img_size)
    if num_classes is not None:
        overrides["num_classes"] = num_classes
    got = P.published(name_or_path, pretrained)  # first: weights that cannot be had are said before any build
    model = build(override(got.preset, overrides) if overrides else got.preset)
    entry, _ = P.load_into(model, got)
    if not overrides and P.params(model) != entry.params:
        raise P.WeightsUnavailable(f"{name_or_path}: the model has {P.params(model):,} parameters, its weights "
                                   f"entry declares {entry.params:,}")
    return model


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
        if getattr(model, "pretrained_cfg", None):  # as timm's feature wrappers keep it
            self.pretrained_cfg = model.pretrained_cfg

    def forward(self, x, **kwargs) -> list:
        return self.model.forward_intermediates(x, self.out_indices, norm=self.norm, intermediates_only=True,
                                                **kwargs)


def register_timm(prefix: str = TIMM_PREFIX) -> list[str]:
    """Make every preset a timm entrypoint `<prefix><name>` (timm's names take no `/`), so that
    `timm.create_model("vspec_deit_tiny", num_classes=10, features_only=True)` calls `create_model`;
    returns the names. Opt-in: importing vspec registers nothing. Safe to call again."""
    with needs("register_timm"):
        from timm.models import _registry, register_model  # extra

    names = []
    for name in presets():
        entry = f"{prefix}{name}"
        names.append(entry)
        if getattr(_registry._model_entrypoints.get(entry), "__module__", None) == __name__:
            continue  # registered by an earlier call (timm warns when a name is registered again)

        def entrypoint(pretrained: bool = False, *, _preset: str = name, **kwargs: Any) -> nn.Module:
            for key in ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir"):  # timm's own, unused here
                kwargs.pop(key, None)
            return create_model(_preset, pretrained=pretrained, **kwargs)

        entrypoint.__name__ = entrypoint.__qualname__ = entry
        entrypoint.__module__ = __name__
        register_model(entrypoint)
    return names
