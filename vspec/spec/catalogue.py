"""The preset catalogue: where presets are looked for and found by name. Torch-free, so that a command naming a
preset (`vspec fit deit_small ...`) does not import torch before it has work for it.

A preset is `specs/<name>.py` of the repository, installed with the package as `vspec/presets/<name>.py`, or a file
of a folder on the `VSPEC_SPECS` search path (searched first), or of a family's preset folder. Wherever a preset is
named, timm's `name.tag` names one of its published weights too (`deit_tiny.fb_in1k`). What a model's name or path
names (a preset, a spec file, a checkpoint or a model folder) is decided here once, wherever one is named: the
commands, `create_model`, published weights (`resolve_name`, `is_checkpoint`).
"""

import difflib
import fnmatch
import os
from pathlib import Path

import attrs

from . import families as family_registry
from .errors import SpecError
from .load import SUFFIXES, load_weights_table, read_spec
from .model import Model

__all__ = [
    "CHECKPOINT_SUFFIXES", "EXAMPLES", "Named", "PRESETS", "is_checkpoint", "list_models", "load_spec", "preset_dirs",
    "preset_file", "preset_path", "preset_ref", "presets", "resolve_name", "spec_file",
]
PRESETS = Path(__file__).parent.parent / "presets"  # specs/ of the repository, installed with the package


def preset_dirs(families: bool = True) -> list[Path]:
    """Where presets are looked for: the folders of `VSPEC_SPECS`, then the package's presets (`specs/`), then
    (`families`) the folders the families declare (`family.PRESETS`, vspec/spec/families.py: importing those
    imports torch).

    Args:
        families: the families' folders too (importing them imports torch); False: VSPEC_SPECS's and specs/ only.
    """
    extra = [Path(p) for p in os.environ.get("VSPEC_SPECS", "").split(os.pathsep) if p]
    if not families:
        return [*extra, PRESETS]
    return [*extra, PRESETS, *map(Path, family_registry.presets())]


def presets(families: bool = True) -> dict[str, Path]:
    """Every preset name and its file (the first folder of `preset_dirs` that has it wins).

    Args:
        families: look in the families' folders too (`preset_dirs`).
    """
    out: dict[str, Path] = {}
    for folder in preset_dirs(families):
        for file in sorted(folder.glob("*.py")) if folder.is_dir() else ():
            if not file.name.startswith("_"):
                out.setdefault(file.stem, file)
    return out


def preset_path(name: str) -> Path:
    """The file of preset `name` (looked for in the families' folders only where the others lack it), or a
    one-line SpecError naming the closest presets.

    Args:
        name: the preset's name (its file's stem).
    """
    near = presets(families=False)
    if name in near:
        return near[name]
    known = presets()
    if name in known:
        return known[name]
    close = difflib.get_close_matches(name, known, n=4, cutoff=0.5)
    hint = f"close: {', '.join(close)}" if close else f"{len(known)} presets in {', '.join(map(str, preset_dirs()))}"
    raise SpecError("", f"unknown preset {name!r} ({hint}); or give a spec file, checkpoint or model folder path")


def preset_file(name: str, tag: str | None = None) -> Path:
    """The file of preset `name` (`preset_path`); a tag (timm's `name.tag`) must be one of its weights', weights
    asked for or not (timm refuses an unknown tag too; a known one names the architecture and its inputs), or a
    one-line SpecError naming its tags. What every consumer of a preset's name goes through.

    Args:
        name: the preset's name.
        tag: a tag of its published weights (timm's `name.tag`), None for none.
    """
    file = preset_path(name)
    if tag is not None:
        tags = load_weights_table(file)
        if tag not in tags:
            raise SpecError("", f"{name!r} has no weights tagged {tag!r}; its tags: {', '.join(tags) or 'none'}")
    return file


# what a path names, never a tag (compared lower-cased)
_FILE_SUFFIXES = (".py", ".json", ".toml", ".yaml", ".yml", ".pt", ".pth", ".tar", ".bin", ".safetensors", ".ckpt",
                 ".onnx", ".pt2", ".gz", ".zip")
CHECKPOINT_SUFFIXES = (".pt", ".pth")  # a checkpoint file's (`vspec.save`, a training run's)


def is_checkpoint(path: str | Path) -> bool:
    """Whether `path` names a saved model, not a spec: a .pt / .pth checkpoint file or a folder (a model folder).
    The one test; an OSError of the file system (a name too long) is the caller's to say.

    Args:
        path: the name or path tested.
    """
    path = Path(path)
    return path.suffix in CHECKPOINT_SUFFIXES or path.is_dir()


@attrs.frozen
class Named:
    """What a model's name or path names (`resolve_name`): `kind` "preset" (`name`, and timm's `tag` or None),
    "file" (a spec file, or a path that is none: its reader says why) or "saved" (a checkpoint or a model folder,
    `is_checkpoint`); `path`: the path given (None for a preset: `preset_file` finds its .py)."""

    kind: str
    path: Path | None = None
    name: str = ""
    tag: str | None = None


def resolve_name(name_or_path: str | Path, saved: bool = False, here: bool = True,
                 unknown: str = "file") -> Named:
    """What `name_or_path` names, the one rule wherever a model is named (`load_spec`, the commands, `create_model`,
    published weights), in this order:

    1. (`saved`) a saved model: a checkpoint file or a model folder (`is_checkpoint`);
    2. a path: a Path; a name with a separator, a spec file's suffix (SUFFIXES) or another file's (_FILE_SUFFIXES:
       with `unknown` "preset", only where it exists); or (`here`) a name that exists here;
    3. a preset: a name without a suffix, or timm's `name.tag` (an identifier, a tag that is no file's suffix);
    4. anything else (`1x.y`): a "file" its reader refuses, or (`unknown` "preset") a preset's name, refused with
       the presets close to it.

    The preset need not exist (`preset_path` says which are near), nor its tag (`preset_file` checks it).

    Args:
        name_or_path: what the user wrote (a preset, `name.tag`, a file, a checkpoint, a folder).
        saved: a checkpoint file or model folder is a saved model (rule 1); False: not asked.
        here: a name that exists in the working folder is a path (rule 2).
        unknown: what a name of none of these shapes is: "file" (its reader refuses it) or "preset".
    """
    path = Path(name_or_path)
    if saved and is_checkpoint(path):
        return Named("saved", path)
    text, suffix = str(name_or_path), path.suffix.lower()
    if (isinstance(name_or_path, Path) or "/" in text or os.sep in text or path.suffix in SUFFIXES
            or suffix in _FILE_SUFFIXES and unknown == "file" or here and path.exists()):
        return Named("file", path)
    if not suffix:
        return Named("preset", name=text)
    name, tag = text.split(".", 1)
    if suffix not in _FILE_SUFFIXES and name.replace("-", "_").isidentifier() and tag:
        return Named("preset", name=name, tag=tag)
    return Named("preset", name=text) if unknown == "preset" else Named("file", path)


def preset_ref(text: str | Path, here: bool = True) -> tuple[str, str | None] | None:
    """(name, tag or None) where `text` names a preset (`resolve_name`), as `name` or timm's `name.tag`; None where
    it is a path.

    Args:
        text: what the user wrote.
        here: a name that exists in the working folder is a path (`resolve_name`).
    """
    named = resolve_name(text, here=here)
    return (named.name, named.tag) if named.kind == "preset" else None


def spec_file(name_or_path: str | Path) -> str | Path:
    """`name_or_path`, or the file of the preset named so (`resolve_name`; a tag must be one of its weights',
    `preset_file`).

    Args:
        name_or_path: a spec file's path, or a preset's name (`name` or `name.tag`).
    """
    named = resolve_name(name_or_path)
    return preset_file(named.name, named.tag) if named.kind == "preset" else name_or_path


# the example specs, not architectures: what `make demo` / `make demo-text` train and `vspec compare`'s specs
EXAMPLES = ("demo_*", "compare_*")


def _is_example(name: str) -> bool:
    """Whether preset `name` is an example spec (EXAMPLES), which `list_models` leaves out unless asked."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in EXAMPLES)


def list_models(filter: str = "*", pretrained: bool = False,  # noqa: A002 - timm's argument name
                examples: bool = False) -> list[str]:
    """The models' preset names matching `filter` (fnmatch, as `timm.list_models` lists architectures), sorted;
    `pretrained`: only presets with published weights, each as `name.tag` (every tag, the default first; a filter
    with a '.' matches those); `examples`: the example specs too (EXAMPLES: the demos' and `vspec compare`'s).

    Args:
        filter: an fnmatch pattern over the names (`name.tag` with `pretrained`).
        pretrained: only presets with published weights, as `name.tag`.
        examples: the example specs too (EXAMPLES).
    """
    out = []
    for name, file in sorted(presets().items()):
        if _is_example(name) and not examples:
            continue
        if not pretrained:
            if fnmatch.fnmatch(name, filter):
                out.append(name)
            continue
        for tag in load_weights_table(file):
            if fnmatch.fnmatch(f"{name}.{tag}" if "." in filter else name, filter):
                out.append(f"{name}.{tag}")
    return out


def load_spec(path: str | Path) -> Model:
    """Read a Model spec from a `.py` file (module-level `SPEC`), `.json` or `.toml` (`read_spec`), or a preset's
    (its name, or timm's `name.tag`: `load_spec("deit_tiny")`).

    Args:
        path: a spec file (.py, .json, .toml), or a preset's name (`name` or `name.tag`).
    """
    return read_spec(spec_file(path))
