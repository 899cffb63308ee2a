"""Model folders, the layout Hugging Face tools move: `config.json` (the spec, versioned) and `model.safetensors`
(the weights, in the `safetensors` format: no pickle, nothing in the file can run).

    vspec.save_pretrained(model, "my-model")       # my-model/config.json, my-model/model.safetensors
    model = vspec.from_pretrained("my-model")

With network access the standard tools push and pull such a folder, e.g. `huggingface_hub.upload_folder(
repo_id="you/my-model", folder_path="my-model")` and `vspec.from_pretrained(huggingface_hub.snapshot_download(
"you/my-model"))`. `from_pretrained` takes a local folder only (the published weights of presets are
`vspec.create_model(name, pretrained=True)`, vspec.weights.published).

config.json: {"format": "vspec-folder-1", "architecture": "vspec", "num_classes", "num_features" (timm's
names, for tools that list models), "spec": the spec as `vspec.to_json` writes it (its own format version
inside: an earlier one is upgraded on load), "sha256", and for a model holding published weights
"pretrained_cfg" (timm's name: the weights' inputs, `vspec.weights.published.pretrained_cfg`; not in the checksum),
"model_type": "vspec" and "architectures" (transformers' names, `_hf_fields`: after `vspec.register_hf()`,
`AutoModel...from_pretrained(folder)` reads the folder; not in the checksum)}.
"sha256" is `vspec.weights.checksum.checksum` over the
format, the spec (its JSON with sorted keys), every tensor of model.safetensors (name, dtype, shape, bytes)
and the aliases below: an edited spec or weight is refused as in a .pt checkpoint (it is no signature).

Shared tensors: safetensors refuses two names over one storage. A name whose tensor is another's (same
storage, offset, shape and strides: a tied weight) is written once and listed in the file's metadata,
"vspec.aliases" = JSON {alias: name}; the model rebuilt from the spec ties them again itself, and both names
are loaded from the one tensor. Tensors that only overlap are written as copies.

Loading applies every check of `vspec.load` through the same code (`vspec.weights.checkpoint.check_checkpoint`: fields,
spec validation and upgrade, sizes before the model is allocated, keys / shapes / dtypes), and reads model.safetensors
safely: the header length is compared with the file size before the header is read, the header is parsed and
every tensor's dtype, shape and byte range checked against the file (in range, no overlap) before any tensor
is read. Every problem is a one-line CheckpointError naming the file.

Folders that transformers wrote of a `vspec.register_hf()` model (`save_pretrained`, `Trainer.save_model`) are
read too (`_hf_checkpoint`): config.json with model_type "vspec" and the spec, its classes `id2label`'s (none for
the base model, architectures ["VspecModel"]), the weights under `model.` and no checksum; the same checks follow.
A folder of weights alone (what Trainer.save_model writes of a model that is no `PreTrainedModel`) loads when its
spec is named (`spec=`); without one it is refused in one line saying so.

Why no `PyTorchModelHubMixin`: its `from_pretrained` builds the class from config.json's keyword arguments and
then loads the weights without vspec's checks (strict=False: missing keys pass); a vspec model is built from
its spec by the compiler, not by a constructor, and the mixin would make huggingface_hub a dependency of every
model class. The folder it writes is the same layout, so the Hub's tools need nothing more."""

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from ..spec import Model, from_json, load_spec, to_dict
from ..spec.errors import cause
from ..version import __version__
from .checkpoint import CheckpointError, check_checkpoint, check_fields, model_of, reading, weights_cfg
from .checksum import checksum

__all__ = ["ALIASES", "DTYPES", "FORMAT", "MAX_CONFIG", "MAX_HEADER", "from_pretrained", "load_folder",
           "save_pretrained"]

FORMAT = "vspec-folder-1"
CONFIG, WEIGHTS = "config.json", "model.safetensors"
ALIASES = "vspec.aliases"  # the safetensors metadata entry of tied names
MAX_CONFIG = 64 * 2**20  # bytes of config.json read at most (a spec is kilobytes)
HF_MODEL_TYPE, HF_PREFIX = "vspec", "model."  # vspec.hf's model_type, and its models' weights' prefix
MAX_HEADER = 100_000_000  # the safetensors header's limit (the library's own)
DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool, "C64": torch.complex64, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}


def _spec_text(spec: dict) -> str:
    """The spec's JSON as the checksum covers it: sorted keys, no spaces."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def _digest(spec: dict, tensors: dict[str, torch.Tensor], aliases: dict[str, str]) -> str:
    return checksum({"format": FORMAT, "spec": _spec_text(spec), "state_dict": dict(sorted(tensors.items())),
                     "aliases": dict(sorted(aliases.items()))})


def _dedupe(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors to write, {alias: name}): a tensor identical in place to an earlier one becomes its alias; one
    that overlaps another's storage otherwise is copied (safetensors refuses shared storage)."""
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    storages: set[tuple] = set()
    for name, t in state.items():
        ptr = t.untyped_storage().data_ptr()  # on its device: a copy to the CPU would have a storage of its own
        where = (t.device, ptr, t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        if t.numel() and where in seen:
            aliases[name] = seen[where]
            continue
        shared = t.numel() and (t.device, ptr) in storages
        t = t.detach()
        t = t.contiguous() if not t.is_contiguous() else t.clone() if shared else t  # channels-last: contiguous
        tensors[name] = t.cpu()
        if t.numel():
            seen[where] = name
            storages.add((t.device, ptr))
    return tensors, aliases


def _write(path: Path, write) -> None:
    """`write(tmp)`, then rename it to `path` (a kill leaves the previous file whole), readable as the umask
    says (safetensors writes its files private)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _hf_fields(spec: Model) -> dict[str, Any]:
    """config.json's fields that transformers reads (vspec.hf): model_type, and architectures, the class of the task
    (`VspecModel` for a model without classes)."""
    task = "VspecModel" if not spec.num_classes else \
        "VspecForSequenceClassification" if spec.embedder.text else "VspecForImageClassification"
    return {"model_type": HF_MODEL_TYPE, "architectures": [task]}


def save_pretrained(model: nn.Module, folder: str | Path, spec: Model | None = None) -> Path:
    """Write `model` as a model folder, config.json and model.safetensors (see the module's docstring); missing
    folders are created, the two files overwritten, others in the folder left.

    Args:
        model: a vspec model (as `vspec.build` or `vspec.create_model` make one).
        folder: the folder to write.
        spec: the spec to record (default `model.spec`).

    Returns:
        The folder.
    """
    spec = spec if spec is not None else model.spec
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors, aliases = _dedupe(model.state_dict())
    spec_dict = json.loads(json.dumps(to_dict(spec)))  # plain JSON values, as a reader sees them
    metadata = {"format": "pt", **({ALIASES: json.dumps(aliases)} if aliases else {})}
    config = {"format": FORMAT, "vspec_version": __version__, "architecture": "vspec",
              "num_classes": spec.num_classes,
              "num_features": getattr(model, "num_features", spec.dim), "spec": spec_dict,
              "sha256": _digest(spec_dict, tensors, aliases), **_hf_fields(spec)}
    if cfg := weights_cfg(model):  # the inputs of the weights it holds (timm writes it so too)
        config["pretrained_cfg"] = dict(cfg)
    _write(folder / WEIGHTS, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))
    _write(folder / CONFIG, lambda tmp: tmp.write_text(json.dumps(config, indent=2) + "\n"))
    return folder


def _regular(file: Path) -> None:
    if not file.is_file():
        raise CheckpointError(file, "no such file (a model folder holds config.json and model.safetensors)"
                              if not file.exists() else "not a file")


def _config(file: Path) -> dict[str, Any]:
    """config.json, parsed and its fields checked (not yet the spec)."""
    with reading(file):
        _regular(file)
        if file.stat().st_size > MAX_CONFIG:
            raise CheckpointError(file, f"{file.stat().st_size:,} bytes, more than the {MAX_CONFIG:,} a "
                                        "config.json of vspec may have")
        with open(file, "rb") as f:
            raw = f.read(MAX_CONFIG + 1)  # a special file's size says nothing
    if len(raw) > MAX_CONFIG:
        raise CheckpointError(file, f"more than the {MAX_CONFIG:,} bytes a config.json of vspec may have")
    try:
        config = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, or an int beyond Python's 4300 digits
        raise CheckpointError(file, f"not JSON ({cause(e)})") from None
    except RecursionError:
        raise CheckpointError(file, "not JSON vspec reads: nested too deep") from None
    if not isinstance(config, dict):
        raise CheckpointError(file, f"not a JSON table (a {type(config).__name__})")
    if config.get("format") != FORMAT and not _from_hf(config):
        shown = repr(config["format"])[:40] if "format" in config else "none"
        raise CheckpointError(file, f"not a vspec model folder's config (format {shown}, not {FORMAT!r}; a Hugging "
                                    "Face transformers folder converts with vspec.convert.hf.from_hf)")
    if _from_hf(config):
        check_fields(config, {"spec": (dict,)}, file)
        check_fields(config, {"id2label": (dict,), "architectures": (list,)}, file, required=False)
        return config
    check_fields(config, {"spec": (dict,)}, file)
    check_fields(config, {"sha256": (str,), "pretrained_cfg": (dict,)}, file, required=False)
    return config


def _fail(file: Path, what: str) -> CheckpointError:
    return CheckpointError(file, f"not a readable safetensors file ({what})")


def _header(file: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The safetensors header's tensor entries and metadata, each entry checked against the file's size."""
    size = file.stat().st_size
    with open(file, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise _fail(file, f"{size} bytes, not even the 8-byte length of its header")
        n = int.from_bytes(head, "little")
        if n > size - 8 or n > MAX_HEADER:
            raise _fail(file, f"its header declares {n:,} bytes; the file holds {size - 8:,} after the length"
                              + (f", and headers of more than {MAX_HEADER:,} are refused" if n > MAX_HEADER else
                                 ": truncated, or not a safetensors file"))
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise _fail(file, f"its header is not JSON: {cause(e)}") from None
    except RecursionError:
        raise _fail(file, "its header is nested too deep") from None
    if not isinstance(header, dict):
        raise _fail(file, "its header is not a JSON table")
    metadata = header.pop("__metadata__", None) or {}
    if not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise _fail(file, "its __metadata__ is not a table of strings")
    data, spans = size - 8 - n, []
    for name, entry in header.items():
        where = f"tensor {name[:80]!r}"
        if not (isinstance(entry, dict) and {"dtype", "shape", "data_offsets"} <= entry.keys()):
            raise _fail(file, f"{where}: not a table of dtype, shape and data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPES:
            raise _fail(file, f"{where}: dtype {str(dtype)[:20]!r}, not one of {', '.join(DTYPES)}")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
            raise _fail(file, f"{where}: shape {str(shape)[:40]} is not a list of sizes")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
                and 0 <= offsets[0] <= offsets[1] <= data):
            raise _fail(file, f"{where}: data_offsets {str(offsets)[:40]} outside the file's {data:,} bytes of data")
        numel = 1
        for d in shape:
            numel *= d
        if offsets[1] - offsets[0] != numel * DTYPES[dtype].itemsize:
            raise _fail(file, f"{where}: {offsets[1] - offsets[0]:,} bytes for shape {shape} of {dtype}")
        spans.append((offsets[0], offsets[1], name))
    spans.sort()
    for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
        if begin < end:
            raise _fail(file, f"tensors {a[:40]!r} and {b[:40]!r} overlap")
    return header, metadata


def _weights(file: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """model.safetensors' tensors (after `_header`'s checks) and its aliases {alias: name}."""
    with reading(file):
        _regular(file)
        header, metadata = _header(file)
    try:
        aliases = json.loads(metadata.get(ALIASES, "{}"))
    except (ValueError, RecursionError) as e:
        raise _fail(file, f"its metadata {ALIASES!r} is not JSON: {cause(e)}") from None
    if not (isinstance(aliases, dict) and all(isinstance(v, str) and v in header and k not in header
                                              for k, v in aliases.items())):
        raise _fail(file, f"its metadata {ALIASES!r} is not a table of new names to tensors it holds")

    try:
        with safe_open(str(file), framework="pt") as f:
            tensors = {name: f.get_tensor(name) for name in header}
    except Exception as e:  # noqa: BLE001 - the library's own refusal of a damaged file, in one line
        raise _fail(file, cause(e)) from None
    return tensors, aliases


def _from_hf(config: dict[str, Any]) -> bool:
    """Whether config.json is one transformers wrote of a vspec.register_hf() model (no vspec folder format)."""
    return "format" not in config and config.get("model_type") == HF_MODEL_TYPE


def _hf_checkpoint(config: dict[str, Any], tensors: dict[str, torch.Tensor], weights_file: Path
                   ) -> tuple[dict, dict[str, torch.Tensor]]:
    """(spec, weights) of a folder transformers wrote of a vspec.register_hf() model: the spec's classes are
    `id2label`'s (0 for the base model, `VspecModel`), the weights' `model.` prefix is removed."""
    spec = dict(config["spec"])
    if config.get("architectures") == ["VspecModel"]:
        spec["num_classes"] = 0
    elif "id2label" in config:
        spec["num_classes"] = len(config["id2label"])
    if stray := next((k for k in tensors if not k.startswith(HF_PREFIX)), None):
        raise CheckpointError(weights_file, f"tensor {stray[:80]!r} is not under {HF_PREFIX!r}, as the weights of a "
                                            "vspec.register_hf() model are (its config.json says it is one)")
    return spec, {k.removeprefix(HF_PREFIX): v for k, v in tensors.items()}


_NO_CONFIG = ("no such file, the folder holds weights alone: what Hugging Face's Trainer.save_model writes of a model "
              "that is not a PreTrainedModel; name its spec (vspec.from_pretrained(folder, spec=...), "
              "vspec.create_model(spec, checkpoint_path=folder)), or train the vspec.register_hf() model, whose "
              "save_model writes config.json")


def load_folder(folder: str | Path, spec: Model | None = None) -> dict[str, Any]:
    """A model folder as a checked checkpoint dict ({"format", "spec" (JSON text), "state_dict", ...}, see
    `vspec.weights.checkpoint.check_checkpoint`): config.json and model.safetensors read, the checksum verified
    (a folder that transformers wrote of a vspec.register_hf() model has none: `_hf_checkpoint`).

    Args:
        folder: the model folder.
        spec: the spec of a folder of weights alone (model.safetensors, no config.json), which without it is
            refused (`_NO_CONFIG`); a folder with config.json uses the spec there.
    """
    folder = Path(folder)
    config_file, weights_file = folder / CONFIG, folder / WEIGHTS
    with reading(folder):
        if not folder.is_dir():
            raise CheckpointError(folder, "no such model folder" if not folder.exists() else
                                          "not a folder (a .pt checkpoint loads with vspec.load)")
        bare = not config_file.exists() and weights_file.exists()
    if bare and spec is None:
        raise CheckpointError(config_file, _NO_CONFIG)
    config = {"spec": to_dict(spec)} if bare else _config(config_file)
    tensors, aliases = _weights(weights_file)
    if _from_hf(config):
        config["spec"], tensors = _hf_checkpoint(config, tensors, weights_file)
    saved = config.get("sha256")
    if saved is not None and saved != _digest(config["spec"], tensors, aliases):
        raise CheckpointError(folder, f"checksum mismatch: {CONFIG}'s spec or {WEIGHTS}'s tensors are not what "
                                      "vspec wrote (a corrupt or edited file; 'sha256' covers both)")
    state = {**tensors, **{alias: tensors[name] for alias, name in aliases.items()}}
    ckpt = {"format": FORMAT, "spec": json.dumps(config["spec"]), "state_dict": state,
            **({"pretrained_cfg": config["pretrained_cfg"]} if "pretrained_cfg" in config else {})}
    return check_checkpoint(ckpt, weights_file if bare else config_file, weights_file=weights_file)


def from_pretrained(folder: str | Path, spec: Model | str | Path | None = None) -> nn.Module:
    """Rebuild the model a model folder describes and load its weights, after every check of `vspec.load`.

    Args:
        folder: a model folder (config.json + model.safetensors), as `save_pretrained` writes one, or as
            transformers writes one of a `vspec.register_hf()` model; or model.safetensors alone (what
            `Trainer.save_model` writes of a plain vspec model) with `spec`.
        spec: the spec (a Model, a preset name or a spec file) of a folder of weights alone; a folder with a
            config.json must hold this spec.

    Returns:
        The model with its weights (and the `pretrained_cfg` the folder records, if any), in eval mode as Hugging
        Face's `from_pretrained` gives one (dropout off; `.train()` to fine-tune; `vspec.create_model(folder)`
        gives it in train mode, as timm's).

    Raises:
        CheckpointError: a missing, corrupt or edited folder, in one line (a SpecError) naming the file.
    """
    spec = load_spec(spec) if isinstance(spec, str | Path) else spec
    ckpt = load_folder(folder, spec)
    if spec is not None and from_json(ckpt["spec"]) != spec:
        raise CheckpointError(Path(folder) / CONFIG, "holds another spec than the one given (spec= names the spec of a "
                                                     "folder of weights alone)")
    return model_of(ckpt, Path(folder) / WEIGHTS).eval()
