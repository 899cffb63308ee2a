"""vspec: transformer architectures, for vision and language, declared as data and compiled into PyTorch modules.

The spec language (`vspec.spec`, re-exported here) is torch-free; `build`, `profile`, `load`, `save`,
`save_pretrained` / `from_pretrained` (model folders: config.json + model.safetensors, vspec/weights/folder.py),
`example_input` (a random batch that a spec's model takes), `fit` (the variant of a spec nearest a MAC /
parameter budget, vspec/fitting.py) and `head_loss` (the loss of a training forward's declared outputs, asked for
with `model.set_training_outputs(True)`: vspec/nn/head_outputs.py) import torch when first used; `fast_paths(False)`
turns vspec's CPU fast paths off within a block (vspec/ops/fast.py); `register_family(package)` adds a family of kinds,
modules and converters from outside vspec (vspec/spec/families.py); `create_model` is timm's factory for vspec
models and `register_timm()` makes every preset a timm entrypoint `vspec_<name>` (vspec/factory.py);
`register_hf()` makes vspec models transformers models, for its `Auto*` classes, `Trainer` and pipelines
(vspec/hf.py). `python -m vspec` is the `vspec` command.
"""

from importlib import import_module
from pathlib import Path as _Path

from . import _moved  # the previous release's import paths, kept for one release
from .spec import *  # noqa: F403
from .spec import __all__ as _spec_all
from .spec import families as _families
from .version import __version__ as __version__  # re-exported

_LAZY = {"build": "vspec.compiler", "profile": "vspec.profiler", "load": "vspec.weights.loading",
         "save": "vspec.weights.checkpoint", "Profile": "vspec.profiler", "fast_paths": "vspec.ops.fast",
         "example_input": "vspec.nn.model", "create_model": "vspec.factory",
         "save_pretrained": "vspec.weights.folder", "from_pretrained": "vspec.weights.folder",
         "register_family": "vspec.spec.families", "fit": "vspec.fitting", "list_models": "vspec.spec.catalogue",
         "head_loss": "vspec.nn.head_outputs", "register_timm": "vspec.factory", "register_hf": "vspec.hf"}

__all__ = sorted([*_spec_all, *_LAZY])


def __getattr__(name: str):
    """The functions of `_LAZY` (their module imported now), the families' kinds (as `vspec.spec`'s), the package's
    modules (`vspec.convert`), else the previous release's names (vspec/_moved.py)."""
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    found = _families.exported()
    if name in found:
        return found[name]
    here = _Path(__file__).parent
    if name.isidentifier() and ((here / name / "__init__.py").is_file() or (here / f"{name}.py").is_file()):
        return import_module(f"{__name__}.{name}")  # a subpackage or module: `vspec.convert.from_timm(...)`
    return _moved.moved(__name__, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_families.exported()})
