"""The import paths of the previous release that moved (the families into vspec/models/<family>/, the commands into
vspec/cli/; vspec.pretrained's download helpers into vspec.downloads), kept for one release: the one table of what
moved where, each old name served with a DeprecationWarning naming its new place (CHANGELOG.md lists the same rows).

MODULES: old module -> new module. Importing an old module (a finder `import vspec` installs) gives an alias module:
  the new module's names, and the old module's moved names (NAMES) under their old ones.
NAMES: old dotted name -> new dotted name, served by `moved` from the `__getattr__` of the old name's package or
  module. A new name ending in "()" is the value of that call.
Torch-free: a target is imported only when its old name is used.
"""

import importlib
import importlib.util
import sys
import types
import warnings

_FAMILIES = ("conformer", "dhvt", "irpe", "msf", "refiner", "sot", "t2t")
# each family's converter, a `Released` record (vspec/convert/released.py) called as the old function was
_RECORDS = {f: f.upper() for f in _FAMILIES}
# the classes vspec.nn re-exported and the functions vspec.ops did, by family
_NN = {"conformer": "ConformerHead ConformerStem ConvBranch", "dhvt": "DAFF HeadTokens SOPE", "irpe": "IRPEAttention",
       "msf": "MeanShiftAttention WindowMeanShiftAttention", "refiner": "RefinerAttention",
       "sot": "EPN GAPPool GCP LearnableScale MGCrP NoNorm ReprLayerNorm SecondOrderHead SoTEmbed SvPN",
       "t2t": "T2TEmbed"}
_OPS = {"msf": "gaussian_attention gaussian_attention_sdpa gaussian_channels",
        "sot": "covariance cross_covariance epn isqrt_cov power_iteration svpn_approx svpn_exact"}
# the old vspec.cli module's helpers -> their vspec.cli submodule
_CLI = {"analyze": "ANALYSES MAX_BATCHES OUTPUTS", "common": "FILE_KINDS check_fit", "show": "tree",
        "tables": "describe format_table input_label stage_labels"}
# vspec.train.engine's helpers -> the modules they went to
_ENGINE = {"distributed": "Dist init_distributed pick_device", "folder": "MODEL_FOLDERS",
           "tasks": "RegressionLoss evaluate evaluate_text make_criterion to_device"}
# vspec.pretrained's helpers that went to vspec.downloads
_DOWNLOADS = "drop_path hf_cache sha256 torch_checkpoints"

MODULES = {
    "vspec.cli_common": "vspec.cli.common",
    "vspec.train.cli": "vspec.cli.train",
    "vspec.convert.sot_text": "vspec.models.sot.convert_text",
    **{f"vspec.convert.{f}": f"vspec.models.{f}.convert" for f in _FAMILIES},
    **{f"vspec.nn.{f}": f"vspec.models.{f}.modules" for f in _NN},
    **{f"vspec.ops.{f}": f"vspec.models.{f}.ops" for f in ("irpe", "msf", "sot", "t2t")},
    **{f"vspec.spec.{f}": f"vspec.models.{f}.spec" for f in _NN},
}

NAMES = {
    "vspec.convert.OFFICIAL": "vspec.convert.official()",
    "vspec.convert.from_official_sot_text": "vspec.models.sot.convert_text.from_official_sot_text",
    **{f"vspec.convert.from_official_{f}": f"vspec.models.{f}.convert.{r}" for f, r in _RECORDS.items()},
    **{f"vspec.convert.{f}.from_official_{f}": f"vspec.models.{f}.convert.{r}" for f, r in _RECORDS.items()},
    **{f"vspec.convert.{f}.spec_from_config": f"vspec.models.{f}.convert.{r}.spec_of" for f, r in _RECORDS.items()},
    **{f"vspec.convert.{f}.ARGUMENTS": f"vspec.models.{f}.convert.{r}.arguments" for f, r in _RECORDS.items()},
    "vspec.convert.refiner.released_attention": "vspec.models.refiner.spec.released_attention",
    "vspec.convert.refiner.released_blocks": "vspec.models.refiner.spec.released_blocks",
    "vspec.convert.sot.arguments": "vspec.models.sot.convert.SOT.read",
    **{f"vspec.nn.{n}": f"vspec.models.{f}.modules.{n}" for f, names in _NN.items() for n in names.split()},
    "vspec.nn.text.last_real": "vspec.nn.heads.last_real",
    **{f"vspec.ops.{n}": f"vspec.models.{f}.ops.{n}" for f, names in _OPS.items() for n in names.split()},
    "vspec.spec.conv_layout": "vspec.models.conformer.spec.conv_layout",
    "vspec.ops.msf.grouped_linear": "vspec.ops.vit.grouped_linear",
    "vspec.ops.msf.structured": "vspec.ops.vit.structured",
    **{f"vspec.cli.cmd_{c}": f"vspec.cli.{c}.run"
       for c in ("analyze", "build", "compare", "export", "profile", "show")},
    **{f"vspec.cli.{n}": f"vspec.cli.{m}.{n}" for m, names in _CLI.items() for n in names.split()},
    "vspec.train.cli.train_main": "vspec.cli.train.main",
    "vspec.train.cli.eval_main": "vspec.cli.eval.main",
    "vspec.train.cli.eval_parser": "vspec.cli.eval.eval_parser",
    "vspec.train.cli.evaluate_checkpoint": "vspec.cli.eval.evaluate_checkpoint",
    "vspec.checkpoint.load": "vspec.loading.load",
    "vspec.checkpoint.load_checkpoint": "vspec.loading.load_checkpoint",
    **{f"vspec.pretrained.{n}": f"vspec.downloads.{n}" for n in _DOWNLOADS.split()},
    **{f"vspec.train.engine.{n}": f"vspec.train.{m}.{n}" for m, names in _ENGINE.items() for n in names.split()},
    # issue 56 (benchmarks and names): the blocks left vspec/nn/model.py for vspec/nn/blocks.py; Transformer's old name
    **{f"vspec.nn.model.{n}": f"vspec.nn.blocks.{n}" for n in ("Block", "Carry", "NO_STATE", "PostNormBlock", "Stage")},
    "vspec.nn.model.VisionTransformer": "vspec.nn.model.Transformer",
    "vspec.nn.VisionTransformer": "vspec.nn.model.Transformer",
}


def resolve(path: str):
    """The object a dotted name names (its longest importable prefix, then attributes); "f()" is f's value."""
    if path.endswith("()"):
        return resolve(path[:-2])()
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if not f"{name}.".startswith(f"{e.name}."):  # a module the target imports is missing: not ours to hide
                raise
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ModuleNotFoundError(f"No module named {path!r}", name=path)


def _warn(old: str, new: str, stacklevel: int) -> None:
    warnings.warn(f"{old} moved to {new}; the old name goes in the next release", DeprecationWarning,
                  stacklevel=stacklevel + 1)


def moved(owner: str, name: str):
    """`owner.name` where it is an old name of the table: warn and return what it is now; otherwise AttributeError.
    For an old package's or module's `__getattr__` (the warning points at the caller of that `__getattr__`)."""
    old = f"{owner}.{name}"
    if old in NAMES:
        _warn(old, NAMES[old], 3)
        return resolve(NAMES[old])
    if old in MODULES:
        _warn(old, MODULES[old], 3)
        if old not in sys.modules:  # as an import would: in sys.modules and on its package
            sys.modules[old] = importlib.util.module_from_spec(importlib.util.spec_from_loader(old, _FINDER))
            setattr(sys.modules[owner], name, sys.modules[old])
        return sys.modules[old]
    raise AttributeError(f"module {owner!r} has no attribute {name!r}")


class _Alias(types.ModuleType):
    """An old module: its moved names (warned, `moved`) and every name of its new module."""

    def __getattr__(self, name: str):
        if f"{self.__name__}.{name}" in NAMES:
            return moved(self.__name__, name)
        return getattr(importlib.import_module(MODULES[self.__name__]), name)

    def __dir__(self):
        own = [old.rpartition(".")[2] for old in NAMES if old.rpartition(".")[0] == self.__name__]
        return sorted({*dir(importlib.import_module(MODULES[self.__name__])), *own})

    def __repr__(self) -> str:
        return f"<module {self.__name__!r}, moved to {MODULES[self.__name__]!r}>"


class _Finder:
    """The meta-path finder and loader of the old modules (MODULES); it answers no other name."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MODULES else None

    def create_module(self, spec):
        return _Alias(spec.name)

    def exec_module(self, module):
        _warn(module.__name__, MODULES[module.__name__], 2)  # the import machinery's frames are skipped


_FINDER = _Finder()
if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.append(_FINDER)
