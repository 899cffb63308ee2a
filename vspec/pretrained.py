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
4. keeps the converted model folder (config.json + model.safetensors, vspec.hub) in vspec's cache,
   `$VSPEC_CACHE/pretrained/<preset>.<tag>/` (`VSPEC_CACHE` default `~/.cache/vspec`), written aside and renamed.
Later calls read only that folder (a corrupt one is refused, removed and made again from the source).

The model built keeps everything of the checkpoint that fits: the body always; the head's parts where the preset's
head has them with the same shape (timm's 1000 classes); the rest of the head starts fresh, as timm's `num_classes`
and transformers' task models on a pretrained body do. A source that is missing and cannot be fetched (offline, no
network, a page only a person can follow) is a one-line `WeightsUnavailable` naming the URL and the exact path to
put the file at; nothing half-written is left in any cache.
"""

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from .checkpoint import CheckpointError, cause, check_weights, load_checkpoint
from .spec import Model, SpecError, from_json, load_weights_table
from .spec.weights import Hub, Manual, Url, Weights


class WeightsUnavailable(SpecError):
    """Published weights that cannot be had or used: a one-line message (the CLI exits 2)."""

    def __init__(self, message: str):
        super().__init__("", message)


# ---------------------------------------------------------------- where things are


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")


def offline() -> bool:
    """Hugging Face's switch, read at each call (huggingface_hub reads it once, at import): HF_HUB_OFFLINE=1."""
    return _truthy("HF_HUB_OFFLINE")


def _home_cache(*parts: str) -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", *parts)


def hf_cache() -> Path:
    """Hugging Face's hub cache as huggingface_hub finds it: HF_HUB_CACHE, else HF_HOME/hub, else
    ~/.cache/huggingface/hub (read at each call, so that a changed environment is honoured)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return _home_cache("huggingface", "hub")


def torch_checkpoints() -> Path:
    """torch hub's checkpoint folder (`torch.hub.get_dir()/checkpoints`, TORCH_HOME honoured)."""
    return Path(torch.hub.get_dir()) / "checkpoints"


def vspec_cache() -> Path:
    """vspec's own cache: VSPEC_CACHE, else ~/.cache/vspec."""
    return Path(os.environ["VSPEC_CACHE"]) if os.environ.get("VSPEC_CACHE") else _home_cache("vspec")


def converted_folder(name: str, tag: str) -> Path:
    """Where the converted model folder of preset `name`'s weights `tag` is kept."""
    return vspec_cache() / "pretrained" / f"{name}.{tag}"


def drop_path(source: Hub | Url | Manual, file: str | None = None) -> Path:
    """Where a person puts a file a program could not fetch: torch hub's checkpoints/<file> for a URL or a page;
    for a Hub file, vspec's cache downloads/<repo>/<file> (Hugging Face's cache is keyed by commits)."""
    if isinstance(source, Hub):
        return vspec_cache() / "downloads" / source.repo / (file or source.file)
    return torch_checkpoints() / source.file


# ---------------------------------------------------------------- the table


def locate(name_or_path: str | Path) -> tuple[str, Path]:
    """(the cache's name, the .py file) of a preset name or a preset-style spec file (one that may declare
    WEIGHTS beside its SPEC; its file name is its name in the cache)."""
    from .factory import preset_path

    path = Path(name_or_path)
    if path.suffix == ".py" and path.is_file():
        return path.stem, path
    if path.suffix:
        raise WeightsUnavailable(f"{name_or_path}: published weights are declared in a preset's .py file "
                                 f"(WEIGHTS beside SPEC), not in a {path.suffix} file")
    return str(name_or_path), preset_path(str(name_or_path))


def choose(name: str, file: Path, pretrained: bool | str) -> tuple[str, Weights]:
    """(tag, entry) of `pretrained=True` (the first tag, the default) or `pretrained="<tag>"`."""
    table = load_weights_table(file)
    if not table:
        raise WeightsUnavailable(f"{name!r} declares no published weights (`vspec weights` lists the presets that "
                                 "do)")
    if pretrained is True:
        return next(iter(table.items()))
    if not isinstance(pretrained, str) or pretrained not in table:
        raise WeightsUnavailable(f"{name!r} has no weights tagged {pretrained!r}; its tags: {', '.join(table)}")
    return pretrained, table[pretrained]


# ---------------------------------------------------------------- fetching


def _unavailable(name: str, tag: str, source: Hub | Url | Manual, file: str, url: str, why: str) -> WeightsUnavailable:
    return WeightsUnavailable(f"{name} ({tag}): {why}; download {url} and put it at {drop_path(source, file)}")


def _hub_file(name: str, tag: str, source: Hub, file: str) -> Path:
    dropped = drop_path(source, file)
    if dropped.is_file():
        return dropped
    url = f"https://huggingface.co/{source.repo}/resolve/{source.revision}/{file}"
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:
        raise _unavailable(name, tag, source, file, url, "huggingface_hub is not installed") from None
    try:
        return Path(hf_hub_download(source.repo, file, revision=source.revision, cache_dir=hf_cache(),
                                    local_files_only=offline()))
    except LocalEntryNotFoundError:
        why = "not in Hugging Face's cache and HF_HUB_OFFLINE is set" if offline() else \
            "not in Hugging Face's cache and it cannot be downloaded (no network?)"
        raise _unavailable(name, tag, source, file, url, why) from None
    except Exception as e:  # noqa: BLE001 - any other failure of the Hub (gated, removed, HTTP): one line
        raise _unavailable(name, tag, source, file, url, f"the Hub refused it ({cause(e)})") from None


def _url_file(name: str, tag: str, source: Url | Manual) -> Path:
    path = drop_path(source)
    if path.is_file():
        return path
    if isinstance(source, Manual):
        raise _unavailable(name, tag, source, source.file, source.page,
                           f"{source.file} is behind a page a program cannot follow")
    if offline():
        raise _unavailable(name, tag, source, source.file, source.url, "not in torch hub's cache and "
                                                                       "HF_HUB_OFFLINE is set")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # torch writes a temporary file beside it and renames it when whole
        torch.hub.download_url_to_file(source.url, str(path), hash_prefix=None, progress=True)
    except Exception as e:  # noqa: BLE001 - no network, HTTP errors: one line
        raise _unavailable(name, tag, source, source.file, source.url, f"it cannot be downloaded ({cause(e)})") \
            from None
    return path


def fetch(name: str, tag: str, entry: Weights) -> dict[str, Path]:
    """The source's files ({"weights": path[, "config": path]}) in their caches, fetched where missing."""
    source = entry.source
    if isinstance(source, Hub):
        files = {"weights": _hub_file(name, tag, source, source.file)}
        if source.config is not None:
            files["config"] = _hub_file(name, tag, source, source.config)
        return files
    return {"weights": _url_file(name, tag, source)}


def sha256(path: Path) -> str:
    """The file's sha256 (hex), read in 16 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def expected_digest(path: Path, source: Hub | Url | Manual) -> str | None:
    """The sha256 a fetched file must have: a URL's or page's published one; for a Hub file, its blob's name
    where that is a sha256 (Git LFS files, i.e. every weights file: the Hub names the blob by the content's
    digest)."""
    if not isinstance(source, Hub):
        return source.sha256
    blob = path.resolve().name
    return blob if len(blob) == 64 and set(blob) <= set("0123456789abcdef") else None


def verify(name: str, tag: str, entry: Weights, files: Mapping[str, Path]) -> None:
    """A corrupt source file (its digest not the published one) is refused, naming it."""
    for path in files.values():
        want = expected_digest(path, entry.source)
        if want is not None and sha256(path) != want:
            raise WeightsUnavailable(f"{name} ({tag}): {path} is corrupt (its sha256 is not the published {want}); "
                                     "delete it and run again to fetch it anew")


# ---------------------------------------------------------------- converting


def read_state(name: str, tag: str, path: Path, unwrap: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The state dict of a published file: safetensors, or a torch pickle (weights only) whose top-level dict
    may wrap it under one of `unwrap`'s keys."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state: Any = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file: one line, and it is not used
        raise WeightsUnavailable(f"{name} ({tag}): {path} cannot be read ({cause(e)}); delete it and run again to "
                                 "fetch it anew") from None
    for key in unwrap:
        if isinstance(state, Mapping) and isinstance(state.get(key), Mapping):
            state = state[key]
            break
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WeightsUnavailable(f"{name} ({tag}): {path} holds no state dict (under {', '.join(unwrap) or 'the top'})")
    return dict(state)


def published_model(name: str, tag: str, entry: Weights, spec: Model, files: Mapping[str, Path]) -> nn.Module:
    """The published model, converted (its own head: `entry.classes` classes, or the Hub model's), after checking
    that the preset `spec` is that model but for the head."""
    from .convert import ConversionError, from_hf, from_official, from_timm

    state = read_state(name, tag, files["weights"], entry.unwrap)
    try:
        if entry.converter == "timm":
            model = from_timm(state, attrs.evolve(spec, num_classes=entry.classes))
        elif entry.converter == "hf":
            config = json.loads(Path(files["config"]).read_text())
            model = from_hf(state, config={**entry.config, **config} if isinstance(config, dict) else config)
        else:
            with warnings.catch_warnings():  # the converter's notes were read when the entry was written
                warnings.simplefilter("ignore")
                model = from_official(entry.converter, state, entry.config)
    except (ConversionError, SpecError, KeyError) as e:
        raise WeightsUnavailable(f"{name} ({tag}): {files['weights']} does not convert ({cause(e)})") from None
    body = attrs.evolve(spec, head=model.spec.head, num_classes=model.spec.num_classes)
    if body != model.spec:
        raise WeightsUnavailable(f"{name} ({tag}): the preset is not the published model: "
                                 f"{_first_difference(body, model.spec)}")
    return model


def _first_difference(a: Model, b: Model) -> str:
    from .spec import to_dict

    def walk(x: Any, y: Any, path: str) -> str | None:
        if isinstance(x, dict) and isinstance(y, dict):
            for key in sorted(set(x) | set(y)):
                found = walk(x.get(key), y.get(key), f"{path}.{key}" if path else key)
                if found:
                    return found
            return None
        return None if x == y else f"{path or 'spec'}: preset {x!r}, published {y!r}"

    return walk(to_dict(a), to_dict(b), "") or "the specs differ"


def converted(name: str, tag: str, entry: Weights, spec: Model) -> tuple[Path, dict[str, Any]]:
    """The converted model folder of (name, tag) and its checked contents (`load_checkpoint`), made where missing
    or corrupt (see the module's docstring)."""
    from .hub import save_pretrained

    folder = converted_folder(name, tag)
    if folder.is_dir():
        try:
            return folder, load_checkpoint(folder)
        except CheckpointError as e:
            warnings.warn(f"{name} ({tag}): the converted weights in vspec's cache are refused and made anew ({e})",
                          stacklevel=3)
            shutil.rmtree(folder)
    files = fetch(name, tag, entry)
    verify(name, tag, entry, files)
    model = published_model(name, tag, entry, spec, files)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:  # written aside, then renamed: a killed run leaves no half-written folder under the real name
        save_pretrained(model, tmp)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process converted it meanwhile: its folder stands
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder, load_checkpoint(folder)


def load_pretrained(model: nn.Module, weights: Mapping[str, torch.Tensor], file: str | Path) -> list[str]:
    """Load published `weights` into `model`: every body weight (a CheckpointError when one is missing or
    misshapen), the head's where the model's head has them with the same shape; returns the head's keys that
    start fresh."""
    own = model.state_dict()
    body = {k: v for k, v in weights.items() if not k.startswith("head.")}
    check_weights({k: v for k, v in own.items() if not k.startswith("head.")}, body, file, "published weights")
    head = {k: v for k, v in weights.items() if k.startswith("head.") and k in own and own[k].shape == v.shape}
    model.load_state_dict({**body, **head}, strict=False)
    return [k for k in own if k.startswith("head.") and k not in head]


def pretrained_folder(name_or_path: str | Path, pretrained: bool | str) -> tuple[Path, Weights]:
    """(the converted model folder, the entry) of a preset's published weights, converted where missing."""
    from .spec import load_spec

    name, file = locate(name_or_path)
    tag, entry = choose(name, file, pretrained)
    return converted(name, tag, entry, load_spec(file))[0], entry


def load_into(model: nn.Module, name_or_path: str | Path, pretrained: bool | str) -> tuple[Weights, list[str]]:
    """Load the published weights of a preset (a name or its .py file; `pretrained`: True or a tag) into `model`,
    a build of that preset's spec with any changes (classes, image size, dropout...): fetched and converted where
    not yet in vspec's cache, the position tables resampled to the model's image size, the body loaded, the head's
    parts that fit too (`load_pretrained`). Returns (the entry, the head's keys that start fresh)."""
    from .resample import resample_state
    from .spec import load_spec

    name, file = locate(name_or_path)
    tag, entry = choose(name, file, pretrained)
    folder, ckpt = converted(name, tag, entry, load_spec(file))
    published, weights = from_json(ckpt["spec"]), ckpt["state_dict"]
    if model.spec.img_size != published.img_size:
        weights = resample_state(weights, published, attrs.evolve(published, img_size=model.spec.img_size))
    return entry, load_pretrained(model, weights, folder)


def tokenizer_path(text: str | None, name_or_path: str | Path | None = None,
                   pretrained: bool | str = False) -> str | None:
    """A `--tokenizer` value as a local folder: `hf:<repo id>` fetched (`tokenizer_folder`), a folder as given;
    None with `pretrained`: the tokenizer of the preset's weights entry (`Weights.tokenizer`), else None."""
    if text is None and pretrained and name_or_path is not None:
        name, file = locate(name_or_path)
        repo = choose(name, file, pretrained)[1].tokenizer
        return str(tokenizer_folder(repo)) if repo else None
    if text is not None and text.startswith("hf:"):
        return str(tokenizer_folder(text.removeprefix("hf:")))
    return text


def tokenizer_folder(repo: str) -> Path:
    """A Hub repository's tokenizer files (no weights), through Hugging Face's cache (`HF_HUB_OFFLINE` honoured),
    as a folder `transformers.AutoTokenizer` reads."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise WeightsUnavailable(f"hf:{repo}: huggingface_hub is not installed") from None
    try:
        return Path(snapshot_download(repo, allow_patterns=["*.json", "*.txt", "*.model"], cache_dir=hf_cache(),
                                      local_files_only=offline()))
    except Exception as e:  # noqa: BLE001 - offline with nothing cached, no network, no such repository
        raise WeightsUnavailable(f"hf:{repo}: its tokenizer is not in Hugging Face's cache ({hf_cache()}) and cannot "
                                 f"be downloaded ({cause(e)})") from None


def params(model: nn.Module) -> int:
    """Parameters as a Weights entry counts them: every one the model holds (trainable or not), tied ones once."""
    return sum(p.numel() for p in model.parameters())
