"""Published weights converted into vspec's cache: `converted(name, tag, entry, spec)` makes and checks the model folder
(config.json + model.safetensors, vspec.weights.folder) `$VSPEC_CACHE/pretrained/<preset>.<tag>/` of a preset's
published weights (the catalogue, vspec.weights.published, says which).

The first call fetches the source (vspec.weights.download), verifies its digest, reads it (`read_state`: safetensors,
or a torch pickle read with weights_only=True), converts it with the named converter (timm's, Hugging Face's, or the
family's released one), checks that the preset is the published model but for the head (`published_difference`)
and writes the folder aside, then renames it: a killed run leaves nothing half-written. Later calls read only that
folder, checked by `cached_folder` (one that is corrupt or holds another model is refused, removed and made again
from the source). `pretrained_cfg` is timm's record of the weights' inputs that the folder and the model carry.
"""

import argparse
import json
import os
import shutil
import stat
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import torch
from safetensors.torch import load_file
from torch import nn

from ..convert import ConversionError, from_hf, from_official, from_timm
from ..convert.hf import read_config
from ..spec import Model, SpecError, from_json
from ..spec.errors import cause, file_kind
from ..spec.serialize import first_difference
from ..spec.weights import PublishedWeights
from .cache import WeightsUnavailable, regular_file, vspec_cache
from .checkpoint import CheckpointError
from .download import fetch, verify
from .folder import save_pretrained
from .loading import load_checkpoint

__all__ = ["DDP_PREFIX", "RELEASE_GLOBALS", "cached_folder", "converted", "converted_folder", "pretrained_cfg",
           "published_difference", "published_model", "read_state"]

# ---------------------------------------------------------------- vspec's cache


def converted_folder(name: str, tag: str) -> Path:
    """Where the converted model folder of preset `name`'s weights `tag` is kept.

    Args:
        name: the preset's name.
        tag: the weights' tag.
    """
    return vspec_cache() / "pretrained" / f"{name}.{tag}"


# ---------------------------------------------------------------- converting

# what a released training script's checkpoint holds besides tensors and plain values: its command line (timm's
# train.py and the DeiT-style main.py of iRPE and Conformer save `args`); allowed to be read, nothing of it runs
RELEASE_GLOBALS = (argparse.Namespace,)
DDP_PREFIX = "module."  # a DistributedDataParallel model's state dict, saved without unwrapping


def read_state(name: str, tag: str, path: Path, unwrap: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The state dict of a published file: safetensors, or a torch pickle read with weights_only=True (and the
    globals a release file holds, `RELEASE_GLOBALS`) whose top-level dict may wrap it under one of `unwrap`'s keys;
    a DDP run's `module.` prefixes are stripped, as the released loaders do.

    Args:
        name: the preset's name, for the messages.
        tag: the weights' tag, for the messages.
        path: the published file.
        unwrap: the keys under which a pickle's dict may hold the state dict.
    """
    what = f"{name} ({tag})"
    regular_file(path, what)
    try:
        if path.suffix == ".safetensors":
            state: Any = load_file(str(path))
        else:
            with torch.serialization.safe_globals(list(RELEASE_GLOBALS)), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a foreign pickle's warnings are no second line of the error
                state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file: one line, and it is not used
        refused = "unsupported global" in str(e).lower()
        raise WeightsUnavailable(f"{what}: {path} cannot be read ({cause(e)}" + (
            "; nothing of it was run)" if refused else "); delete it and run again to fetch it anew")) from None
    for key in unwrap:
        if isinstance(state, Mapping) and isinstance(state.get(key), Mapping):
            state = state[key]
            break
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WeightsUnavailable(f"{what}: {path} holds no state dict (under {', '.join(unwrap) or 'the top'})")
    return {k.removeprefix(DDP_PREFIX) if isinstance(k, str) else k: v for k, v in state.items()}


def published_model(name: str, tag: str, entry: PublishedWeights, spec: Model, files: Mapping[str, Path]) -> nn.Module:
    """The published model, converted (its own head: `entry.classes` classes, or the Hub model's), after checking
    that the preset `spec` is that model but for the head (`published_difference`).

    Args:
        name: the preset's name.
        tag: the weights' tag.
        entry: its published-weights entry.
        spec: the preset's spec.
        files: the fetched files (`fetch`).
    """
    state = read_state(name, tag, files["weights"], entry.unwrap)
    try:
        config = read_config(files["config"]) if entry.converter == "hf" else None
    except ConversionError as e:
        raise WeightsUnavailable(f"{name} ({tag}): {e}; delete it and run again to fetch it anew") from None
    try:
        with warnings.catch_warnings():  # the converters' notes were read when the entry was written
            warnings.simplefilter("ignore")
            if entry.converter == "timm":
                model = from_timm(state, attrs.evolve(spec, num_classes=entry.classes))
            elif entry.converter == "hf":
                model = from_hf(state, config={**entry.config, **config})
            else:
                model = from_official(entry.converter, state, entry.config)
    except (ConversionError, SpecError, KeyError) as e:
        raise WeightsUnavailable(f"{name} ({tag}): {files['weights']} does not convert ({cause(e, 300)})") from None
    if (why := published_difference(entry, spec, model.spec)) is not None:
        raise WeightsUnavailable(f"{name} ({tag}): the preset is not the published model: {why}")
    return model


def published_difference(entry: PublishedWeights, spec: Model, published: Model) -> str | None:
    """Why `published` (a converted model's spec) is not preset `spec`'s published model of `entry` (the same
    spec but for the head, and `entry.classes` classes), or None.

    Args:
        entry: the published-weights entry.
        spec: the preset's spec.
        published: the converted model's spec.
    """
    if published.num_classes != entry.classes:
        return f"num_classes: {published.num_classes}, the entry's {entry.classes}"
    body = attrs.evolve(spec, head=published.head, num_classes=published.num_classes)
    return None if body == published else _first_difference(body, published)


def _first_difference(a: Model, b: Model) -> str:
    found = first_difference(a, b)
    return f"{found[0] or 'spec'}: preset {found[1]!r}, published {found[2]!r}" if found else "the specs differ"


def cached_folder(name: str, tag: str, entry: PublishedWeights, spec: Model) -> dict[str, Any] | None:
    """The checked contents of (name, tag)'s converted model folder in vspec's cache, or None where there is none.
    The one check of every reader of that cache: the folder reads (`load_checkpoint`) and holds the published
    model of preset `spec` (`published_difference`). One that does not is refused with a warning and removed (the
    caller makes it anew); one linked from elsewhere is refused, not removed; a file, FIFO or other thing under
    the folder's name is refused.

    Args:
        name: the preset's name.
        tag: the weights' tag.
        entry: its published-weights entry.
        spec: the preset's spec.
    """
    folder = converted_folder(name, tag)
    what = f"{name} ({tag})"
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        raise WeightsUnavailable(f"{what}: {folder} cannot be read ({e.strerror or cause(e)})") from None
    if not stat.S_ISDIR(mode) and not stat.S_ISLNK(mode):
        kind = "a file" if stat.S_ISREG(mode) else file_kind(mode)
        raise WeightsUnavailable(f"{what}: {folder} is {kind}, not the model folder vspec converts into; delete it "
                                 "and run again")
    try:
        ckpt = load_checkpoint(folder)
        why = published_difference(entry, spec, from_json(ckpt["spec"]))
        if why is not None:
            raise CheckpointError(folder, f"not the published model of the preset ({why})")
        if "pretrained_cfg" not in ckpt:  # converted by an earlier vspec: its record added, the weights kept
            cfg = pretrained_cfg(name, tag, entry, from_json(ckpt["spec"]), verified=False)
            ckpt["pretrained_cfg"] = cfg if stat.S_ISLNK(mode) else _record(folder, cfg)  # not through a link
        return ckpt
    except CheckpointError as e:
        if stat.S_ISLNK(mode):
            raise WeightsUnavailable(f"{what}: {folder} is a symbolic link to what vspec refuses ({e}); vspec "
                                     "removes nothing through a link: delete the link and run again") from None
        warnings.warn(f"{what}: the converted weights in vspec's cache are refused and made anew ({e})",
                      stacklevel=4)
    try:
        shutil.rmtree(folder)
    except OSError as e:
        raise WeightsUnavailable(f"{what}: {folder} cannot be removed ({e.strerror or cause(e)})") from None
    return None


def _record(folder: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """Add `cfg` as config.json's pretrained_cfg of a folder an earlier vspec converted (not in its checksum; the
    check of its source is not known then: unverified), written aside and renamed; where the cache cannot be
    written, the folder stays as it is and `cfg` holds for this run."""
    file = folder / "config.json"
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
        tmp = file.with_name(f".config.json.{os.getpid()}")
        tmp.write_text(json.dumps({**config, "pretrained_cfg": cfg}, indent=2) + "\n")
        os.replace(tmp, file)
    except (OSError, ValueError):
        pass
    return cfg


def converted(name: str, tag: str, entry: PublishedWeights, spec: Model) -> tuple[Path, dict[str, Any]]:
    """The converted model folder of (name, tag) and its checked contents (`load_checkpoint`), made where missing
    or refused (`cached_folder`; see the module's docstring).

    Args:
        name: the preset's name.
        tag: the weights' tag.
        entry: its published-weights entry.
        spec: the preset's spec.
    """
    folder = converted_folder(name, tag)
    if (ckpt := cached_folder(name, tag, entry, spec)) is not None:
        return folder, ckpt
    files = fetch(name, tag, entry)
    verified = verify(name, tag, entry, files)
    model = published_model(name, tag, entry, spec, files)
    if not verified:  # said once the file is accepted (one that does not convert is only refused)
        warnings.warn(f"{name} ({tag}): {files['weights']} is unverified: no published sha256 is known for it (a "
                      "file put by hand, or a source that publishes none); it is used as it is", stacklevel=4)
    # the folder carries the weights' inputs and whether they were checked against a published digest
    model.pretrained_cfg = pretrained_cfg(name, tag, entry, model.spec, verified)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    except OSError as e:  # VSPEC_CACHE read-only, or on /proc
        raise WeightsUnavailable(f"{name} ({tag}): vspec's cache {folder.parent} cannot be written "
                                 f"({e.strerror or cause(e)}); set VSPEC_CACHE to a writable folder") from None
    try:  # written aside, then renamed: a killed run leaves no half-written folder under the real name
        save_pretrained(model, tmp)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process converted it meanwhile: its folder stands
            if not folder.is_dir():
                raise
    except OSError as e:
        raise WeightsUnavailable(f"{name} ({tag}): {folder} cannot be written ({e.strerror or cause(e)})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder, load_checkpoint(folder)


def pretrained_cfg(name: str, tag: str, entry: PublishedWeights, spec: Model, verified: bool) -> dict[str, Any]:
    """timm's pretrained_cfg of a model that holds (name, tag)'s weights (`model.pretrained_cfg`, so that
    `timm.data.resolve_data_config(model=model)` gives the weights' transform): the entry's inputs
    (`PublishedWeights.data_config`) at the model's own size, its classes, where the weights came from and whether their
    file was checked against a published sha256 (`verified`).

    Args:
        name: the preset's name.
        tag: the weights' tag.
        entry: its published-weights entry.
        spec: the model's spec (its size and classes).
        verified: whether the file was checked against a published sha256.
    """
    cfg = {"architecture": name, "tag": tag, "source": entry.source.where, "num_classes": spec.num_classes,
           **entry.data_config(), "verified": verified}
    if "input_size" in cfg:
        cfg["input_size"] = (spec.in_chans, *spec.img_size)
    return cfg
