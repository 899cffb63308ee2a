"""Checkpoints that carry their spec: `{"format", "spec" (JSON text), "state_dict", "sha256"}`;
training checkpoints add "ema", optimizer state and so on (vspec.train.checkpoints). Those of earlier
releases are upgraded on load.

`read_checkpoint` reads every checkpoint file (behind `vspec.weights.loading.load_checkpoint`: `vspec.load`,
`vspec eval`, `vspec analyze`; tools/train.py --resume): it reads with `weights_only=True` (no code in a file ever runs)
and, for a zip file (what torch.save writes), memory-maps its records after refusing compressed ones, so that nothing
is allocated that the file does not hold; it walks the file without recursion (refusing a container that contains
itself, or one holding tensors reached by several paths), checks the checksum, validates the structure, upgrades the
spec and compares the weights' keys, shapes and sizes with what the spec builds (on the meta device) before any
consumer allocates the model. Every problem is a one-line CheckpointError that names the file and the cause. Model
folders (vspec.weights.folder: config.json + model.safetensors)
are read by their own reader and then go through the same checks (`check_checkpoint`).

Checksums: "sha256" covers the whole file's content (the spec text, every field, every tensor's dtype,
shape and bytes), so that an edited spec or field is refused like a flipped weight. Checkpoints of the
previous release carry "tensor_sha256" instead, which covers the tensors only: it is verified, and the
rest of such a file is taken as it is (re-save it to cover everything). A checksum is no signature:
whoever edits a file on purpose can recompute it."""

import warnings
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from ..compiler import build, check_fit
from ..compiler import weights as count
from ..spec import Model, SpecError, budget, from_json, to_json
from ..spec.budget import nbytes, size
from ..spec.errors import cause
from ..spec.weights import INPUTS
from ..version import __version__
from .checksum import CONTAINERS, checksum, children, tensor_checksum
from .resample import resample_state
from .upgrade import migrate_checkpoint

__all__ = ["CHECKSUM", "CHUNK", "CheckpointError", "FINITE_CHECKED", "FORMAT", "MODEL_FIELDS", "OPTIONAL_FIELDS",
           "Scan", "TENSOR_CHECKSUM", "at_img_size", "check_checkpoint", "check_fields", "check_weights", "load_saved",
           "load_weights", "model_of", "nonfinite", "read", "read_checkpoint", "reading", "save", "timm_cfg",
           "weights_cfg", "with_checksum"]

FORMAT = "vspec-checkpoint-1"
CHECKSUM = "sha256"  # of everything in the file (`checksum`)
TENSOR_CHECKSUM = "tensor_sha256"  # the previous release's: of the tensors alone (`tensor_checksum`)
# the fields every checkpoint has, and their types (None: the field may be None)
MODEL_FIELDS: dict[str, tuple] = {"spec": (str,), "state_dict": (dict,)}
OPTIONAL_FIELDS: dict[str, tuple] = {"format": (str,), "ema": (dict, type(None)), CHECKSUM: (str,),
                                     TENSOR_CHECKSUM: (str,), "pretrained_cfg": (dict,), "vspec_version": (str,)}
# how far the tensors' references may exceed their distinct bytes (one tensor under many keys), and how far
# the weights a spec describes may exceed those a file holds (half-precision weights are half the size)
REPEATS, SLACK, SPEC_RATIO = 4, 16 * 2**20, 4


class CheckpointError(SpecError):
    """A checkpoint that cannot be used; the message is one line: `FILE: cause`."""

    def __init__(self, file: str | Path, message: str):
        super().__init__("", f"{file}: {message}")
        self.file = file


@contextmanager
def reading(file: str | Path):
    """An OSError while reading `file` (EIO of a special file, a name too long, a permission) as a one-line
    CheckpointError naming it.

    Args:
        file: the file named in the error."""
    try:
        yield
    except OSError as e:
        raise CheckpointError(file, f"cannot be read ({e.strerror or cause(e)})") from None


class Scan:
    """One walk over a checkpoint's objects, without recursion: every distinct tensor once (`tensors`, by id),
    how many bytes its references add up to (`referenced`), and the path to an object (`path`). A container
    that contains itself, one that holds tensors and is reached by several paths, a tensor that is not a dense
    CPU tensor within its storage, and tensors that overlap one another many times over are refused."""

    def __init__(self, obj: Any, file: str | Path):
        self.file = file
        self.parent: dict[int, tuple[int | None, Any]] = {id(obj): (None, None)}
        self.tensors: dict[int, torch.Tensor] = {}
        self.referenced = 0
        open_: set[int] = {id(obj)}
        done: dict[int, bool] = {}  # id -> whether it holds a tensor
        stack = [(obj, iter(children(obj)), [False])]
        while stack:
            container, items, holds = stack[-1]
            for key, child in items:
                if isinstance(child, torch.Tensor):
                    self._tensor(child, id(container), key)
                    holds[0] = True
                elif isinstance(child, CONTAINERS):
                    c = id(child)
                    if c in open_:
                        self._refuse(id(container), key, f"contains itself ({{here}} is {self.path(c)})")
                    if c in done:
                        if done[c]:
                            self._refuse(id(container), key, "reaches a container holding tensors by several paths "
                                                             f"({self.path(c)} and {{here}}); vspec writes none")
                        continue
                    self.parent[c] = (id(container), key)
                    open_.add(c)
                    stack.append((child, iter(children(child)), [False]))
                    break
            else:
                stack.pop()
                open_.discard(id(container))
                done[id(container)] = holds[0]
                if stack:
                    stack[-1][2][0] |= holds[0]
        distinct = nbytes(self.tensors.values())
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in self.tensors.values()}
        if self.referenced > REPEATS * distinct + SLACK:
            raise CheckpointError(file, f"its tensors are reached by paths adding up to {size(self.referenced)}, "
                                        f"{self.referenced / max(distinct, 1):.0f} times their "
                                        f"{size(distinct)}: not what torch.save writes of vspec's state")
        if distinct > REPEATS * sum(storages.values()) + SLACK:
            raise CheckpointError(file, f"its tensors overlap one another: {size(distinct)} of tensors over "
                                        f"{size(sum(storages.values()))} of storage")

    def path(self, node: int, key: Any = None, limit: int = 6) -> str:
        """The dotted path to `node` (then `key`), its first and last parts where it is long."""
        parts = [] if key is None else [str(key)]
        while node is not None:
            up, k = self.parent[node]
            if up is not None:
                parts.append(str(k))
            node = up
        parts.reverse()
        if len(parts) <= limit:
            return ".".join(parts)
        return f"{'.'.join(parts[:3])}...{'.'.join(parts[-2:])} [{len(parts)} levels]"

    def _refuse(self, parent: int, key: Any, what: str) -> None:
        """`what` (with `{here}`: the path to `key` in `parent`) about the top-level field that holds it."""
        here = self.path(parent, key)
        raise CheckpointError(self.file, f"its '{here.split('.')[0]}' " + what.replace("{here}", here))

    def _tensor(self, t: torch.Tensor, parent: int, key: Any) -> None:
        if t.layout != torch.strided:
            self._refuse(parent, key, f"holds a {str(t.layout).removeprefix('torch.')} tensor at {{here}}; vspec "
                                      "writes dense ones")
        if t.device.type != "cpu":
            self._refuse(parent, key, f"holds a tensor on the {t.device.type} device (no data) at {{here}}")
        if t.is_quantized:
            self._refuse(parent, key, "holds a quantized tensor at {here}; vspec writes plain ones")
        if nbytes((t,)) > t.untyped_storage().nbytes():
            storage = size(t.untyped_storage().nbytes())
            self._refuse(parent, key, f"holds a tensor of {size(nbytes((t,)))} over {storage} of storage at {{here}} "
                                      f"(strides {list(t.stride())}: it overlaps itself)")
        self.referenced += nbytes((t,))
        self.tensors.setdefault(id(t), t)


def with_checksum(state: dict[str, Any]) -> dict[str, Any]:
    """`state` plus the checksum of everything in it, for saving.

    Args:
        state: the checkpoint's entries (an old checksum in it is replaced)."""
    plain = {k: v for k, v in state.items() if k not in (CHECKSUM, TENSOR_CHECKSUM)}
    return {**plain, CHECKSUM: checksum(plain)}


def save(model: nn.Module, path: str | Path, spec: Model | None = None) -> Path:
    """Write `model`'s weights with its spec (default `model.spec`) as JSON, and their checksum.

    Args:
        model: the model whose state dict is written (and its `pretrained_cfg`, when it records the weights' inputs).
        path: the `.pt` file (its folder is made); returned.
        spec: the spec written; None: `model.spec`.
    """
    spec = spec if spec is not None else model.spec
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = weights_cfg(model)
    torch.save(with_checksum({"format": FORMAT, "vspec_version": __version__, "spec": to_json(spec),
                              "state_dict": model.state_dict(),
                              **({"pretrained_cfg": dict(cfg)} if cfg else {})}), path)
    return path


def _type_names(types: tuple) -> str:
    return " or ".join("None" if t is type(None) else t.__name__ for t in types)


def _a(name: str) -> str:
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def check_fields(ckpt: dict, fields: dict[str, tuple], file: str | Path, required: bool = True) -> None:
    """Each field present (when `required`) and of one of its types (an int is no bool).

    Args:
        ckpt: the checkpoint dict.
        fields: entry name -> the types it may have.
        file: the file named in the error.
        required: whether a missing entry is an error.
    """
    for name, types in fields.items():
        if name not in ckpt:
            if required:
                raise CheckpointError(file, f"the checkpoint has no '{name}' entry")
            continue
        value = ckpt[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise CheckpointError(file, f"the checkpoint's '{name}' is {_a(type(value).__name__)}, not "
                                        f"{_a(_type_names(types))}")


def _zip_records(path: Path) -> bool:
    """Whether `path` is a zip file (torch.save's format), after refusing records that torch.save never
    writes: compressed ones (inflating one allocates what the file does not hold: a 1 MB file can declare a
    GiB) and ones larger than the file."""
    if not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as z:
            records = z.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
        raise CheckpointError(path, f"not a readable checkpoint (a damaged zip file: {cause(e)})") from None
    file_size = path.stat().st_size
    for r in records:
        if r.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(path, f"its record {r.filename!r} is compressed ({size(r.compress_size)} "
                                        f"declared to inflate to {size(r.file_size)}); torch.save writes records "
                                        "uncompressed, and this one is not read")
        if r.file_size > file_size:
            raise CheckpointError(path, f"its record {r.filename!r} declares {size(r.file_size)}, more than the "
                                        f"file's {size(file_size)}")
    return True


def read(path: str | Path) -> dict[str, Any]:
    """The raw checkpoint dict, read with weights_only=True (a zip file memory-mapped, see `_zip_records`),
    walked (`Scan`) and its checksum (when it has one) verified.

    Args:
        path: the checkpoint file."""
    path = Path(path)
    with reading(path):
        if not path.is_file():
            raise CheckpointError(path, "no such checkpoint" if not path.exists() else "not a file")
        if path.stat().st_size == 0:
            raise CheckpointError(path, "empty file, not a checkpoint")
        mmap = _zip_records(path)
    try:
        with warnings.catch_warnings():  # a foreign pickle's warnings are no second line of the error
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # noqa: BLE001 - any unreadable file is reported the same way
        refused = "unsupported global" in str(e).lower()  # not a mere corrupt byte stream
        raise CheckpointError(path, "not a readable checkpoint (" + (
            f"holds what weights_only loading refuses, nothing of it was run: {cause(e)})" if refused else
            f"truncated, corrupt or not written by torch.save: {cause(e)})")) from None
    if not isinstance(ckpt, dict):
        raise CheckpointError(path, f"not a vspec checkpoint ({_a(type(ckpt).__name__)}, not a dict)")
    Scan(ckpt, path)
    content = {k: v for k, v in ckpt.items() if k not in (CHECKSUM, TENSOR_CHECKSUM)}
    for key, digest in ((CHECKSUM, checksum), (TENSOR_CHECKSUM, tensor_checksum)):
        saved = ckpt.get(key)
        if saved is not None and (not isinstance(saved, str) or saved != digest(content)):
            raise CheckpointError(path, "checksum mismatch: its content is not what vspec wrote (a corrupt or "
                                        f"edited file; '{key}' covers " + (
                                            "all of it)" if key == CHECKSUM else "its tensors)"))
    return ckpt


def _weights_fit(ckpt: dict[str, Any], file: Path) -> None:
    """Compare the weights ("state_dict", "ema") with what the spec builds, before anything is allocated:
    first the sizes (its blocks against the weights' keys, the blocks' objects against the memory free, then
    the weights counted on the meta device, `vspec.compiler.weights`, against the bytes the file holds), then the
    keys, shapes and kinds of dtype of the model built on the meta device."""
    spec = from_json(ckpt["spec"])
    weights = ckpt["state_dict"]
    held = nbytes(weights.values())
    if spec.depth > len(weights):
        raise CheckpointError(file, f"its spec describes a model of {spec.depth:,} blocks, but its 'state_dict' holds "
                                    f"{len(weights):,} tensors: not that model's weights")
    budget.check(spec, batch=0, tied=True, what="reading its spec")
    params = count(spec).params
    if params > SPEC_RATIO * held + 2**16:
        raise CheckpointError(file, f"its spec describes a model of about {size(params)} of weights in "
                                    f"{spec.depth:,} blocks, but its 'state_dict' holds {size(held)} in "
                                    f"{len(weights):,} tensors: not that model's weights")
    model = build(spec, device="meta")
    own = model.state_dict()
    check_weights(own, weights, file)
    if isinstance(ckpt.get("ema"), dict):
        check_weights(own, ckpt["ema"], file, "EMA weights")


def read_checkpoint(path: str | Path, fields: dict[str, tuple] | None = None,
                    formats: tuple[str, ...] | None = None) -> dict:
    """The checkpoint dict of a file, read and checked (see `read`), then validated and upgraded
    (`check_checkpoint`). A file or a model folder: `vspec.weights.loading.load_checkpoint`.

    Args:
        path: the `.pt` file (a folder is refused).
        fields: the extra entries it must hold, each with its types; None: none.
        formats: the "format" values accepted; None: any.
    """
    path = Path(path)
    with reading(path):
        folder = path.is_dir()
    if folder:
        raise CheckpointError(path, "a folder, not a checkpoint file (a model folder holds weights, not a "
                                    "training run's state)")
    return check_checkpoint(read(path), path, fields, formats)


def check_checkpoint(ckpt: dict[str, Any], path: str | Path, fields: dict[str, tuple] | None = None,
                     formats: tuple[str, ...] | None = None, weights_file: str | Path | None = None) -> dict:
    """A read checkpoint dict validated (the model fields, plus `fields` with their types; a "format" among
    `formats` when given), upgraded to the current spec format, and its weights compared with the spec's model
    (`_weights_fit`). Errors name `path`, those about the weights `weights_file` (default `path`): a model
    folder (vspec.weights.folder) keeps its spec and its weights in two files.

    Args:
        ckpt: the raw dict (`read`).
        path: the file named in the errors.
        fields: the extra entries it must hold, each with its types; None: none.
        formats: the "format" values accepted; None: any.
        weights_file: the file named in errors about the weights; None: `path`.
    """
    path = Path(path)
    wfile = Path(weights_file) if weights_file is not None else path
    if "spec" not in ckpt and "state_dict" not in ckpt:
        raise CheckpointError(path, "not a vspec checkpoint (no 'spec' and 'state_dict' entries)")
    check_fields(ckpt, MODEL_FIELDS, path)
    check_fields(ckpt, OPTIONAL_FIELDS, path, required=False)
    if formats is not None and ckpt.get("format") not in formats:
        raise CheckpointError(path, f"format {ckpt.get('format')!r}, not {' or '.join(map(repr, formats))}")
    check_fields(ckpt, fields or {}, path)
    for name in ("state_dict", "ema"):
        weights = ckpt.get(name) or {}
        bad = next((k for k, v in weights.items() if not (isinstance(k, str) and isinstance(v, torch.Tensor))), None)
        if bad is not None:
            raise CheckpointError(wfile, f"the checkpoint's '{name}' maps {str(bad)[:80]!r} to "
                                         f"{_a(type(weights[bad]).__name__)}, not a tensor")
    try:
        ckpt = migrate_checkpoint(ckpt)
    except SpecError as e:
        raise CheckpointError(path, str(e)) from None
    except (RecursionError, ValueError, OverflowError, MemoryError) as e:  # a spec beyond what its reader takes
        raise CheckpointError(path, f"its spec cannot be read ({cause(e)})") from None
    try:
        _weights_fit(ckpt, wfile)
    except CheckpointError:
        raise
    except SpecError as e:
        raise CheckpointError(wfile, str(e)) from None
    except (RecursionError, ValueError, OverflowError, MemoryError) as e:
        raise CheckpointError(path, f"its spec cannot be read ({cause(e)})") from None
    for name, what in (("state_dict", "weight"), ("ema", "EMA weight")):
        bad = nonfinite(ckpt.get(name) or {})
        if bad is not None:
            raise CheckpointError(wfile, f"{what} {bad} holds NaN or infinite values: no model computes with it")
    return ckpt


FINITE_CHECKED = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # isfinite's dtypes (not float8)
CHUNK = 1 << 22  # elements of another float dtype converted to float32 at a time


def _finite(t: torch.Tensor) -> bool:
    if t.dtype in FINITE_CHECKED:
        return bool(t.isfinite().all())
    flat = t.reshape(-1)
    return all(bool(flat[i:i + CHUNK].float().isfinite().all()) for i in range(0, flat.numel(), CHUNK))


def nonfinite(weights: dict[str, torch.Tensor]) -> str | None:
    """The name of the first floating-point tensor in `weights` with a NaN or infinite entry, or None (float8 and
    the other dtypes `isfinite` does not take are checked in float32, a chunk at a time).

    Args:
        weights: a state dict."""
    return next((k for k, v in weights.items() if v.is_floating_point() and not _finite(v)), None)


def _few(keys: list[str], limit: int = 3) -> str:
    return ", ".join(keys[:limit]) + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _kind(dtype: torch.dtype) -> str:
    return "complex" if dtype.is_complex else "floating-point" if dtype.is_floating_point else \
        "boolean" if dtype == torch.bool else "integer"


def check_weights(own: dict[str, torch.Tensor], weights: dict[str, torch.Tensor], file: str | Path,
                  what: str = "weights") -> None:
    """A CheckpointError listing (briefly) the missing, unexpected and misshapen keys of `weights`, and
    those of another kind of dtype (complex for float ...), against the module's state dict `own`.

    Args:
        own: the module's state dict (its keys, shapes and dtypes).
        weights: the checkpoint's.
        file: the file named in the error.
        what: what the weights are called in it.
    """
    problems = []
    if missing := [k for k in own if k not in weights]:
        problems.append(f"missing {_few(missing)}")
    if unexpected := [k for k in weights if k not in own]:
        problems.append(f"unexpected {_few(unexpected)}")
    if shapes := [f"{k} {list(weights[k].shape)} (model {list(v.shape)})" for k, v in own.items()
                  if k in weights and weights[k].shape != v.shape]:
        problems.append(f"shape {_few(shapes, 2)}")
    if kinds := [f"{k} {str(weights[k].dtype).removeprefix('torch.')} ({_kind(weights[k].dtype)}, model "
                 f"{_kind(v.dtype)})" for k, v in own.items()
                 if k in weights and _kind(weights[k].dtype) != _kind(v.dtype)]:
        problems.append(f"dtype {_few(kinds, 2)}")
    if problems:
        raise CheckpointError(file, f"the {what} do not fit its spec: {'; '.join(problems)}")


def load_weights(module: nn.Module, weights: dict[str, torch.Tensor], file: str | Path, what: str = "weights") -> None:
    """module.load_state_dict(weights), or a CheckpointError (see `check_weights`).

    Args:
        module: the module loaded.
        weights: the state dict loaded into it.
        file: the file named in the error.
        what: what the weights are called in it.
    """
    check_weights(module.state_dict(), weights, file, what)
    module.load_state_dict(weights)


def weights_cfg(model: nn.Module) -> dict[str, Any] | None:
    """The model's pretrained_cfg where it gives the inputs of the weights the model holds (published ones, a run's),
    for saving; None where it holds none, or only inputs its preset declares or vspec's default (`INPUTS`).

    Args:
        model: the model saved."""
    cfg = getattr(model, "pretrained_cfg", None)
    return None if not cfg or INPUTS in cfg else cfg


def timm_cfg(cfg: dict[str, Any]) -> dict[str, Any]:
    """A stored pretrained_cfg as timm holds one on a model: sequences as tuples (JSON gave lists).

    Args:
        cfg: the pretrained_cfg as read from a checkpoint or config.json."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items()}


def model_of(ckpt: dict[str, Any], file: str | Path) -> nn.Module:
    """The model a checked checkpoint dict (`check_checkpoint`) describes, with its weights.

    Args:
        ckpt: the checked checkpoint dict.
        file: the file named in errors.
    """
    return load_saved(build(from_json(ckpt["spec"])), ckpt, file)


def load_saved(model: nn.Module, ckpt: dict[str, Any], file: str | Path) -> nn.Module:
    """`model` with a checked checkpoint dict's weights (`load_weights`) and the pretrained_cfg it records.

    Args:
        model: the model built from the checkpoint's spec.
        ckpt: the checked checkpoint dict.
        file: the file named in errors.
    """
    load_weights(model, ckpt["state_dict"], file)
    if ckpt.get("pretrained_cfg"):
        model.pretrained_cfg = timm_cfg(ckpt["pretrained_cfg"])
    return model


def at_img_size(spec: Model, weights: dict[str, torch.Tensor], img_size: Any, path: str | Path,
                batch: int = 0) -> tuple[Model, dict[str, torch.Tensor]]:
    """The spec at `img_size` and the weights resampled to it; a size it refuses, or a model at that size that
    would not fit in memory (with a forward pass at `batch`, when > 0), is a CheckpointError.

    Args:
        spec: the checkpoint's spec.
        weights: its state dict.
        img_size: the new image size (an int or (H, W)).
        path: the file named in errors.
        batch: the batch of a forward pass that must fit in memory too; 0: the model alone is checked.
    """
    try:
        new = attrs.evolve(spec, img_size=img_size)
        check_fit(new, batch, f"the model at img_size {img_size}")  # before the tables are resampled
        return new, resample_state(weights, spec, new)
    except (SpecError, ValueError, TypeError) as e:
        raise CheckpointError(path, f"img_size {img_size}: {e}") from None
