"""Published weights in one call: `create_model(name, pretrained=True | "<tag>")`.

A preset's `WEIGHTS` (vspec.spec.weights) say where its checkpoints are. The first call for a (preset, tag):
1. fetches the source through the ecosystem's own cache: `huggingface_hub.hf_hub_download` into Hugging Face's
   (`HF_HUB_CACHE`, else `HF_HOME/hub`; `HF_HUB_OFFLINE=1` reads only the cache), or for a URL
   `torch.hub.download_url_to_file` into torch hub's `checkpoints/` (`TORCH_HOME`; also where a file that only a
   person can download goes);
2. verifies what can be: the digest (a Hub file's LFS sha256 is its blob's name; a URL's published sha256), then
   the converter's strict key mapping and the parameter count;
3. converts it with the named converter (timm's, Hugging Face's, or the family's released one) and checks that the
   preset is the published model (the same spec but for the head);
4. keeps the converted model folder (config.json + model.safetensors, vspec.weights.folder) in vspec's cache,
   `$VSPEC_CACHE/pretrained/<preset>.<tag>/` (`VSPEC_CACHE` default `~/.cache/vspec`), written aside and renamed.
Later calls read only that folder, checked by `cached_folder` (one that is corrupt or holds another model is
refused, removed and made again from the source). Fetching: vspec.weights.download; where the caches are and
the checks of what they hand back: vspec.weights.cache; converting and the folder in vspec's cache:
vspec.weights.converted.

The model built keeps everything of the checkpoint that fits: the body always; the head's parts where the preset's
head has them with the same shape (timm's 1000 classes); the rest of the head starts fresh, as timm's `num_classes`
and transformers' task models on a pretrained body do. A source that is missing and cannot be fetched (offline, no
network, a page only a person can follow) is a one-line `WeightsUnavailable` naming the URL and the exact path to
put the file at; nothing half-written is left in any cache.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from ..spec import Model, from_json, load_spec, load_weights_table
from ..spec.catalogue import preset_path, resolve_name
from ..spec.weights import PublishedWeights, requested
from .cache import WeightsUnavailable
from .checkpoint import check_weights
from .converted import converted, pretrained_cfg
from .download import tokenizer_folder
from .resample import resample_state

__all__ = ["Published", "choose", "load_into", "load_pretrained", "locate", "params", "pick", "published",
           "tokenizer_path"]

# ---------------------------------------------------------------- the table


def locate(name_or_path: str | Path) -> tuple[str, Path, str | None]:
    """(the cache's name, the .py file, the tag a `name.tag` gives or None) of a preset name (or timm's
    `name.tag`) or a preset-style spec file (one that may declare WEIGHTS beside its SPEC; its file name is its
    name in the cache).

    Args:
        name_or_path: a preset name, `name.tag`, or a preset-style .py file.
    """
    path = Path(name_or_path)
    # weights come from presets alone: a name is a preset's even where a file or folder of that name is here (a
    # Path's text too, where it has no suffix)
    named = resolve_name(name_or_path if path.suffix else str(name_or_path), here=False)
    if named.kind == "preset":
        return named.name, preset_path(named.name), named.tag
    if path.suffix != ".py":
        raise WeightsUnavailable(f"{name_or_path}: published weights are declared beside a preset's SPEC (WEIGHTS); "
                                 "give the preset's name or its .py file")
    if not path.is_file():
        raise WeightsUnavailable(f"{name_or_path}: no such file (a preset's .py file, or its name)")
    return path.stem, path, None


def pick(name_or_path: str | Path, pretrained: bool | str) -> tuple[str, Path, str, PublishedWeights]:
    """(name, .py file, tag, entry) of the weights that `name_or_path` (a preset, `name.tag`, or a .py file) and
    `pretrained` (True or a tag) ask for; a `name.tag` and another tag are refused.

    Args:
        name_or_path: a preset name, `name.tag`, or a preset-style .py file.
        pretrained: True (the default tag) or a tag.
    """
    name, file, tag = locate(name_or_path)
    if tag is not None and pretrained is not True and pretrained != tag:
        requested(pretrained)
        raise WeightsUnavailable(f"{name_or_path}: names the tag {tag!r}, pretrained asks for {pretrained!r}: give one")
    tag, entry = choose(name, file, tag if tag is not None else pretrained)
    return name, file, tag, entry


def choose(name: str, file: Path, pretrained: bool | str) -> tuple[str, PublishedWeights]:
    """(tag, entry) of `pretrained=True` (the first tag, the default) or `pretrained="<tag>"`.

    Args:
        name: the preset's name, for the messages.
        file: the preset's .py file (its WEIGHTS table).
        pretrained: True (the first tag) or a tag.
    """
    requested(pretrained)
    table = load_weights_table(file)
    if not table:
        raise WeightsUnavailable(f"{name!r} declares no published weights (`vspec weights` lists the presets that "
                                 "do)")
    if pretrained is True:
        return next(iter(table.items()))
    if pretrained not in table:
        raise WeightsUnavailable(f"{name!r} has no weights tagged {pretrained!r}; its tags: {', '.join(table)}")
    return pretrained, table[pretrained]


def load_pretrained(model: nn.Module, weights: Mapping[str, torch.Tensor], file: str | Path) -> list[str]:
    """Load published `weights` into `model`: every body weight (a CheckpointError when one is missing or
    misshapen), the head's where the model's head has them with the same shape; returns the head's keys that
    start fresh.

    Args:
        model: the model filled in place.
        weights: the published state dict.
        file: the file named in errors.
    """
    own = model.state_dict()
    body = {k: v for k, v in weights.items() if not k.startswith("head.")}
    check_weights({k: v for k, v in own.items() if not k.startswith("head.")}, body, file, "published weights")
    head = {k: v for k, v in weights.items() if k.startswith("head.") and k in own and own[k].shape == v.shape}
    model.load_state_dict({**body, **head}, strict=False)
    return [k for k in own if k.startswith("head.") and k not in head]


@attrs.frozen
class Published:
    """A preset's published weights as vspec's cache holds them: the entry, its converted model folder and the
    folder's checked contents (`load_checkpoint`); `preset`: the preset's own spec."""

    entry: PublishedWeights
    folder: Path
    ckpt: dict[str, Any]
    preset: Model
    name: str = ""
    tag: str = ""

    @property
    def verified(self) -> bool:
        """Whether the source file was checked against a published sha256 when it was converted."""
        return (self.ckpt.get("pretrained_cfg") or {}).get("verified") is True


def published(name_or_path: str | Path, pretrained: bool | str) -> Published:
    """The published weights of a preset (a name or its .py file; `pretrained`: True or a tag), fetched and
    converted where not yet in vspec's cache. Callers fetch them before building the model, so that weights that
    cannot be had are said at once.

    Args:
        name_or_path: a preset name, `name.tag`, or a preset-style .py file.
        pretrained: True (the default tag) or a tag.
    """
    name, file, tag, entry = pick(name_or_path, pretrained)
    preset = load_spec(file)
    folder, ckpt = converted(name, tag, entry, preset)
    return Published(entry, folder, ckpt, preset, name, tag)


def load_into(model: nn.Module, name_or_path: str | Path | Published,
              pretrained: bool | str = True) -> tuple[PublishedWeights, list[str]]:
    """Load the published weights of a preset (a name or its .py file and `pretrained`, True or a tag; or what
    `published` gave) into `model`, a build of that preset's spec with any changes (classes, image size,
    dropout...): the position tables resampled to the model's image size, the body loaded, the head's parts that
    fit too (`load_pretrained`). Returns (the entry, the head's keys that start fresh).

    Args:
        model: a build of the preset's spec, filled in place (its `pretrained_cfg` set).
        name_or_path: a preset name, `name.tag`, a preset-style .py file, or a `Published`.
        pretrained: True (the default tag) or a tag; unused with a `Published`.
    """
    got = name_or_path if isinstance(name_or_path, Published) else published(name_or_path, pretrained)
    spec, weights = from_json(got.ckpt["spec"]), got.ckpt["state_dict"]
    if model.spec.img_size != spec.img_size:
        weights = resample_state(weights, spec, attrs.evolve(spec, img_size=model.spec.img_size))
    fresh = load_pretrained(model, weights, got.folder)
    model.pretrained_cfg = pretrained_cfg(got.name, got.tag, got.entry, model.spec, got.verified)
    return got.entry, fresh


def tokenizer_path(text: str | None, name_or_path: str | Path | None = None,
                   pretrained: bool | str = False) -> str | None:
    """A `--tokenizer` value as a local folder: `hf:<repo id>` fetched (`tokenizer_folder`), a folder as given;
    None with `pretrained`: the tokenizer of the preset's weights entry (`PublishedWeights.tokenizer`), else None.

    Args:
        text: the `--tokenizer` value (`hf:<repo id>` or a folder), or None.
        name_or_path: the preset (or its .py file) whose weights' tokenizer a None `text` takes, or None.
        pretrained: False, True (the default tag) or a tag: the weights whose tokenizer is taken.
    """
    if text is None and pretrained and name_or_path is not None:
        repo = pick(name_or_path, pretrained)[3].tokenizer
        return str(tokenizer_folder(repo)) if repo else None
    if text is not None and text.startswith("hf:"):
        return str(tokenizer_folder(text.removeprefix("hf:")))
    return text


def params(model: nn.Module) -> int:
    """Parameters as a PublishedWeights entry counts them: every one the model holds (trainable or not), tied ones
    once.

    Args:
        model: the model counted.
    """
    return sum(p.numel() for p in model.parameters())
