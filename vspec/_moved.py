"""The import paths of the previous releases that moved (the families into vspec/models/<family>/, the commands into
vspec/cli/; vspec.pretrained's download helpers into vspec.downloads; the weights modules into vspec/weights/), kept
for one release: the one table of what moved where, each old name served with a DeprecationWarning naming its new
place (CHANGELOG.md lists the same rows).

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
# vspec.pretrained's helpers that went to vspec.downloads (now vspec.weights.cache / vspec.weights.download)
_DOWNLOADS = "drop_path hf_cache sha256 torch_checkpoints"
# issue 56 (weights): the weights modules at the top -> vspec/weights/; the names of an old module that are in
# another module of the package than its MODULES row's (and not imported into that one)
_WEIGHTS = {"checkpoint": "checkpoint", "checksum": "checksum", "downloads": "download", "hub": "folder",
            "loading": "loading", "pretrained": "published", "resample": "resample"}
_CACHE = "torch_checkpoints vspec_cache"
_CONVERTED = "DDP_PREFIX RELEASE_GLOBALS cached_folder converted_folder published_difference published_model read_state"

# issue 56 (the training room, text and token labels): vspec/train/text.py and token_labels.py became packages of
# the same names, their old names served by the package's `__getattr__`; checkpoints.py's atomic writes, crash-test
# hook and run files went to files.py, faults.py and run_folder.py
_TEXT = {"readers": "ENTAIL Example GLUE MAX_FIELD PAIR RT_FILE RT_LABELS RT_VAL Task glue read_glue read_rt_polarity "
                    "rt_polarity",
         "tokenizer": "MAX_TOKENIZER_FILE MAX_UNKNOWN SAMPLE SPECIAL TOKENIZER_SUFFIXES Tokenizer check_tokenizer "
                      "tokenizer_identity tokenizer_mismatch train_wordpiece",
         "batches": "TextData TextDataset pad_batch text_datasets", "metrics": "glue_metrics headline text_metrics"}
_TOKEN_LABELS = ("LABEL_OPS LabelledRandAugment TokenLabels UNMOVED affine_label_map check_label_folder check_map "
                 "crop_plane describe label_op")
_TOKEN_LOSSES = ("N_COMN cos_reg_term relabel_cross_entropy relabel_pooled_cross_entropy soft_cross_entropy "
                 "soft_target_ce_cos_reg")
_CHECKPOINTS = {"files": "SaveError atomic_copy atomic_save atomic_write_text", "faults": "kill_hook kill_point",
                "run_folder": "RUN_FILES clean_stale_temps"}

# issue 56 (a paper is one folder): vspec.analysis's figures -> the family whose paper plots them
_FIGURES = {"msf": "analyze attention_modules feature_norms head_matrices msf_problem plot similarities "
                   "subspace_similarity",
            "refiner": "attention_maps cka_problem default_blocks feature_evolution linear_cka maps_summary plot_cka "
                       "plot_maps"}

# issue 56 (image data, tasks, losses, evaluation): vspec/train/data.py's names -> the vspec.train.data package's
# modules; the flat data modules -> the package's
_DATA = {"sources": "ArrayImages MNIST5K_FILE MNIST5K_VAL SyntheticImages build_datasets cifar10 cifar100 digits "
                    "image_folder mnist5k read_bytes read_image read_mnist5k synthetic",
         "transforms": "ConvertMode build_transforms", "preprocess": "INTERPOLATION eval_crop_ratio",
         "loader": "ResumableSampler build_loaders set_epoch", "registry": "DataError"}
_DATA_MODULES = {"datasets": "registry", "gpu_data": "device_decode", "device_aug": "device_augment",
                 "inputs": "preprocess", "shards": "shards", "pack": "pack", "manifest": "manifest",
                 "prefetch": "prefetch"}
# vspec/train/tasks.py's helpers -> the modules they went to
_TASKS = {"losses": "RegressionLoss make_criterion", "evaluate": "evaluate evaluate_text forward to_device",
          "token_labels.maps": "token_grid"}
# issue 62 (the surface): vspec/train/data/device_augment.py's PIL ops -> vspec/train/data/pil_ops.py
_PIL_OPS = ("apply_lut autocontrast autocontrast_lut brightness color contrast equalize equalize_lut invert posterize "
            "sharpness solarize solarize_add")

MODULES = {
    "vspec.cli_common": "vspec.cli.common",
    "vspec.train.cli": "vspec.cli.train",
    "vspec.convert.sot_text": "vspec.models.sot.convert_text",
    **{f"vspec.convert.{f}": f"vspec.models.{f}.convert" for f in _FAMILIES},
    **{f"vspec.nn.{f}": f"vspec.models.{f}.modules" for f in _NN},
    **{f"vspec.ops.{f}": f"vspec.models.{f}.ops" for f in ("irpe", "msf", "sot", "t2t")},
    **{f"vspec.spec.{f}": f"vspec.models.{f}.spec" for f in _NN},
    # issue 56 (weights): the weights code in one package
    **{f"vspec.{old}": f"vspec.weights.{new}" for old, new in _WEIGHTS.items()},
    # issue 56 (the training room, text and token labels)
    "vspec.train.names": "vspec.train.text",
    "vspec.train.wordpiece": "vspec.train.text.wordpiece",
    "vspec.train.relabel": "vspec.train.token_labels.maps",
    "vspec.train.relabel_mix": "vspec.train.token_labels.mix",
    "vspec.train.labeling": "vspec.train.token_labels.writer",
    "vspec.train.rules": "vspec.train.validators",
    "vspec.train.folder": "vspec.train.run_folder",
    # issue 56 (image data, tasks, losses, evaluation)
    **{f"vspec.train.{old}": f"vspec.train.data.{new}" for old, new in _DATA_MODULES.items()},
    # issue 62 (names that mislead): modules named for what they hold (`core`: the package less its families)
    "vspec.nn.heads": "vspec.nn.head_outputs",
    "vspec.spec.core": "vspec.spec.errors",
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
    "vspec.checkpoint.load": "vspec.weights.loading.load",
    "vspec.checkpoint.load_checkpoint": "vspec.weights.loading.load_checkpoint",
    **{f"vspec.pretrained.{n}": f"vspec.weights.{'download' if n == 'sha256' else 'cache'}.{n}"
       for n in _DOWNLOADS.split()},
    **{f"vspec.train.engine.{n}": f"vspec.train.{m}.{n}" for m, names in _ENGINE.items() for n in names.split()},
    # issue 56 (weights): names of vspec.downloads / vspec.pretrained now in a module of their own
    **{f"vspec.downloads.{n}": f"vspec.weights.cache.{n}" for n in _CACHE.split()},
    **{f"vspec.pretrained.{n}": f"vspec.weights.converted.{n}" for n in _CONVERTED.split()},
    # issue 56 (the training room, text and token labels)
    **{f"vspec.train.text.{n}": f"vspec.train.text.{m}.{n}" for m, names in _TEXT.items() for n in names.split()},
    **{f"vspec.train.token_labels.{n}": f"vspec.train.token_labels.dataset.{n}" for n in _TOKEN_LABELS.split()},
    **{f"vspec.train.relabel.{n}": f"vspec.nn.token_losses.{n}" for n in _TOKEN_LOSSES.split()},
    **{f"vspec.train.checkpoints.{n}": f"vspec.train.{m}.{n}" for m, names in _CHECKPOINTS.items()
       for n in names.split()},
    "vspec.train.engine.TrainConfig": "vspec.train.config.TrainConfig",
    # issue 56 (a paper is one folder): the papers' figures went from vspec.analysis to their families
    **{f"vspec.analysis.{n}": f"vspec.models.{f}.analysis.{n}" for f, names in _FIGURES.items() for n in names.split()},
    # issue 56 (image data, tasks, losses, evaluation)
    **{f"vspec.train.data.{n}": f"vspec.train.data.{m}.{n}" for m, names in _DATA.items() for n in names.split()},
    "vspec.train.gpu_data.AHEAD": "vspec.train.data.pipelines.AHEAD",
    "vspec.train.prefetch.DeviceNormalise": "vspec.train.data.pipelines.DeviceNormalise",
    **{f"vspec.train.tasks.{n}": f"vspec.train.{m}.{n}" for m, names in _TASKS.items() for n in names.split()},
    "vspec.cli.eval.evaluate_checkpoint": "vspec.train.evaluate.evaluate_checkpoint",
    # issue 56 (benchmarks and names): the blocks left vspec/nn/model.py for vspec/nn/blocks.py; Transformer's old name
    **{f"vspec.nn.model.{n}": f"vspec.nn.blocks.{n}" for n in ("Block", "Carry", "NO_STATE", "PostNormBlock", "Stage")},
    "vspec.nn.model.VisionTransformer": "vspec.nn.model.Transformer",
    "vspec.nn.VisionTransformer": "vspec.nn.model.Transformer",
    # issue 62 (one place per idea): the one name resolver and checkpoint test, in vspec.spec.catalogue
    "vspec.factory.CHECKPOINTS": "vspec.spec.catalogue.CHECKPOINT_SUFFIXES",
    **{f"vspec.cli.common.{n}": f"vspec.spec.catalogue.{n}" for n in ("is_checkpoint", "spec_file")},
    # issue 62 (the core free of papers): the papers' parts in the core went to their families, the declarations a
    # paper makes to the spec layer
    "vspec.nn.layers.MapRefiner": "vspec.models.refiner.modules.MapRefiner",
    "vspec.spec.layout.MAPS": "vspec.models.refiner.spec.MAPS",
    "vspec.spec.kinds.PoolKind": "vspec.models.sot.spec.PoolKind",
    "vspec.spec.kinds.ReprNormKind": "vspec.models.sot.spec.ReprNormKind",
    "vspec.train.recipes.MAX_EPOCHS": "vspec.spec.paper.MAX_EPOCHS",
    # issue 62 (names that mislead): `Weights` named three things, `core` four
    "vspec.spec.Weights": "vspec.spec.weights.PublishedWeights",
    "vspec.spec.weights.Weights": "vspec.spec.weights.PublishedWeights",
    "vspec.spec.budget.Weights": "vspec.spec.budget.WeightBytes",
    "vspec.convert.released.Weights": "vspec.convert.released.StateDict",
    "vspec.train.validators.cores": "vspec.train.validators.cpu_count",
    # issue 62 (the surface): PIL's point and enhance ops on tensors, out of the device augmentations' module
    **{f"vspec.train.data.device_augment.{n}": f"vspec.train.data.pil_ops.{n}" for n in _PIL_OPS.split()},
    # issue 63 (bf16 on the CPU): attention's one entry went to a module of its own
    "vspec.ops.precision.sdpa": "vspec.ops.attention.sdpa",
}


def _now(new: str) -> str:
    """Where a target is now when it moved again since its row was written (a row of an earlier release pointing at
    a name a later one moved): one warning, naming the final place."""
    while True:
        owner, _, name = new.rpartition(".")
        if new in NAMES:
            new = NAMES[new]
        elif owner in MODULES:
            new = f"{MODULES[owner]}.{name}"
        else:
            return new


NAMES = {old: _now(new) for old, new in NAMES.items()}


def resolve(path: str):
    """The object a dotted name names (its longest importable prefix, then attributes); "f()" is f's value.

    Args:
        path: the dotted name, e.g. "vspec.weights.cache.hf_cache" (or one ending in "()").
    """
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
    For an old package's or module's `__getattr__` (the warning points at the caller of that `__getattr__`).

    Args:
        owner: the module asked (its `__name__`).
        name: the attribute asked of it.
    """
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
