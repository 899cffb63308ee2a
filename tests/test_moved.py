"""The previous release's import paths (c630afe, before the families moved to vspec/models/ and the commands to
vspec/cli/) work for one release: each old name warns (DeprecationWarning naming its new place) and is the new object;
vspec/_moved.py holds the one table, CHANGELOG.md lists every row of it."""

import importlib
import inspect
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from vspec import _moved

ROOT = Path(__file__).resolve().parent.parent

# The public names of c630afe that are no longer at their place, derived once from that release ("owner: names"):
# each package's attributes, each module's __all__ or top-level definitions (not what it imports). The text body's
# names are at their place again (vspec.spec.text, vspec.nn.text: the text body is core), all but `last_real`; so is
# vspec.nn.ConvStem (the CNN patch stem is core: Refined-ViT and LV-ViT share it).
OLD_GONE = """
vspec: cli_common
vspec.cli: ANALYSES FILE_KINDS MAX_BATCHES OUTPUTS check_fit cmd_analyze cmd_build cmd_compare cmd_export
    cmd_profile cmd_show describe format_table input_label stage_labels tree
vspec.cli_common: MAX_LINE OneLineParser UsageError one_line printable
vspec.convert: OFFICIAL conformer dhvt from_official_conformer from_official_dhvt from_official_irpe
    from_official_msf from_official_refiner from_official_sot from_official_sot_text from_official_t2t irpe msf
    refiner sot sot_text t2t
vspec.convert.conformer: ARGUMENTS from_official_conformer spec_from_config
vspec.convert.dhvt: ARGUMENTS PATCH_SIZES WEIGHT_INITS from_official_dhvt spec_from_config
vspec.convert.irpe: ARGUMENTS PRODUCT SINGLE from_official_irpe spec_from_config
vspec.convert.msf: ARGUMENTS from_official_msf spec_from_config unshuffle
vspec.convert.refiner: ARGUMENTS POS_GRID from_official_refiner released_attention released_blocks spec_from_config
vspec.convert.sot: ARGUMENTS BLOCKS FUSIONS REQUIRED SNAPSHOT TOKEN_TYPES arguments from_official_sot
    spec_from_config
vspec.convert.sot_text: BERT_CONFIG CLASSIFIER REPRESENTATION from_official_sot_text sot_text_head
vspec.convert.t2t: ARGUMENTS RULES TOKENS_TYPES TOKEN_BLOCK from_official_t2t spec_from_config
vspec.factory: TWO_BRANCH
vspec.nn: ConformerHead ConformerStem ConvBranch DAFF EPN GAPPool GCP HeadTokens
    IRPEAttention LearnableScale MGCrP MeanShiftAttention NoNorm RefinerAttention ReprLayerNorm SOPE
    SecondOrderHead SoTEmbed SvPN T2TEmbed WindowMeanShiftAttention conformer dhvt irpe msf refiner sot t2t
vspec.nn.conformer: Bottleneck ConformerHead ConformerStem ConvBranch FCUDown FCUUp
vspec.nn.dhvt: Affine DAFF HeadTokens SOPE
vspec.nn.irpe: IRPEAttention IRPECore
vspec.nn.msf: GaussianAttentionCore GaussianBiasedCore MeanShiftAttention MeanShiftOutput WindowMeanShiftAttention
vspec.nn.refiner: ConvExpandDLA ConvStem DLA MapAttention REFINERS Refiner RefinerAttention SameConv2d bn_affine
    masks_around on_running_stats
vspec.nn.sot: Bottleneck DenseBlock DenseLayer EPN GAPPool GCP InceptionBlock LearnableScale MGCrP NoNorm
    NonLocalBlock ReprLayerNorm SecondOrderHead SoTEmbed SumOfClassifiers SvPN Transition conv_bn_relu
vspec.nn.t2t: T2TEmbed T2T_EPS TokenBlock
vspec.nn.text: last_real
vspec.ops: covariance cross_covariance epn gaussian_attention gaussian_attention_sdpa gaussian_channels irpe
    isqrt_cov msf power_iteration sot svpn_approx svpn_exact t2t
vspec.ops.irpe: contextual_bias contextual_values piecewise_index product_buckets
vspec.ops.msf: gaussian_attention gaussian_attention_sdpa gaussian_channels grouped_linear structured
vspec.ops.sot: CENTERINGS covariance cross_covariance epn isqrt_cov power_iteration svpn_approx svpn_exact
vspec.ops.t2t: performer_attention positive_features random_features soft_split
vspec.spec: conformer dhvt irpe msf refiner sot t2t
vspec.spec.conformer: BRANCH_NORM ConformerHead ConformerStem ConvBranch
vspec.spec.dhvt: DAFF DHVT_NORM HeadTokens SOPE
vspec.spec.irpe: IRPEAttention PLACES
vspec.spec.msf: FORMS MeanShiftAttention MeanShiftForm WindowMeanShiftAttention
vspec.spec.refiner: CONSTRAINTS ConvStem FORMS Refine RefinerAttention
vspec.spec.sot: EPN FUSIONS GAPPool GCP LearnableScale MGCrP NoNorm PADDINGS ReprLayerNorm SecondOrderHead SoTEmbed
    SvPN language_head
vspec.spec.t2t: SOFT_SPLITS T2TEmbed TOKEN_BLOCKS
vspec.train: cli
vspec.train.cli: config_from_args eval_main eval_parser
    evaluate_checkpoint train_main train_parser
vspec.train.engine: Dist MODEL_FOLDERS RegressionLoss evaluate evaluate_text init_distributed make_criterion
    pick_device to_device
"""

# old names with no equivalent (CHANGELOG.md's "Removed")
REMOVED = ["vspec.convert.sot.SNAPSHOT", "vspec.convert.t2t.RULES", "vspec.convert.t2t.TOKEN_BLOCK",
           "vspec.factory.TWO_BRANCH"]


def _names(text: str) -> list[str]:
    names, owner = [], ""
    for token in text.split():
        if token.endswith(":"):
            owner = token[:-1]
        else:
            names.append(f"{owner}.{token}")
    return names


def _quietly(path: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return importlib.import_module(path)


def _same(got, new: str) -> bool:
    """`got` is the object `new` names (equal where each lookup makes a fresh one: a call, a bound method)."""
    expected = _moved.resolve(new)
    return got is expected or ((new.endswith("()") or inspect.ismethod(expected)) and got == expected)


def _message(old: str, new: str) -> str:
    return f"^{re.escape(old)} moved to {re.escape(new)}; the old name goes in the next release$"


@pytest.fixture(autouse=True)
def no_old_modules():
    """Every test imports the old modules afresh (an import warns once, as any module runs once)."""

    def forget():
        for old in _moved.MODULES:
            sys.modules.pop(old, None)
            owner, _, name = old.rpartition(".")
            if owner in sys.modules:
                vars(sys.modules[owner]).pop(name, None)

    forget()
    yield
    forget()


def test_every_gone_name_of_the_previous_release_is_moved_or_removed():
    old = _names(OLD_GONE)
    assert len(old) == 254

    def covered(name: str) -> bool:
        owner, _, attr = name.rpartition(".")
        in_new_module = owner in _moved.MODULES and hasattr(_quietly(_moved.MODULES[owner]), attr)
        return name in _moved.NAMES or name in _moved.MODULES or in_new_module or name in REMOVED

    assert [n for n in old if not covered(n)] == []
    assert not set(REMOVED) & {*_moved.NAMES, *_moved.MODULES}


@pytest.mark.parametrize("old", sorted(_moved.NAMES))
def test_an_old_name_warns_and_is_the_new_object(old):
    new = _moved.NAMES[old]
    owner, _, name = old.rpartition(".")
    module = _quietly(owner)
    with pytest.warns(DeprecationWarning, match=_message(old, new)) as record:
        got = getattr(module, name)
    assert _same(got, new)
    assert record[0].filename == __file__  # the warning points at the line that used the old name


@pytest.mark.parametrize("old", sorted(_moved.MODULES))
def test_an_old_module_warns_and_has_the_new_modules_names(old):
    new = importlib.import_module(_moved.MODULES[old])
    with pytest.warns(DeprecationWarning, match=_message(old, _moved.MODULES[old])):
        module = importlib.import_module(old)
    assert sys.modules[old] is module and module.__name__ == old
    assert all(getattr(module, n) is getattr(new, n) for n in dir(new) if not n.startswith("_"))
    assert {n for n in dir(new) if not n.startswith("_")} <= set(dir(module))


# vspec.train.cli was not an attribute of vspec.train before it was imported; the other old modules were
@pytest.mark.parametrize("old", sorted(m for m in _moved.MODULES if m != "vspec.train.cli"))
def test_an_old_module_as_its_packages_attribute(old):
    owner, _, name = old.rpartition(".")
    package = importlib.import_module(owner)
    with pytest.warns(DeprecationWarning, match=_message(old, _moved.MODULES[old])) as record:
        module = getattr(package, name)
    assert record[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module(old) is module and getattr(package, name) is module


def test_the_old_statements_work_and_their_warnings_point_at_them():
    from vspec.models.refiner.modules import RefinerAttention as new_attention
    from vspec.models.sot.ops import svpn_exact as new_svpn
    from vspec.models.t2t.convert import T2T

    def warns(old: str):
        return pytest.warns(DeprecationWarning, match=f"^{re.escape(old)} moved to ")

    with warns("vspec.convert.t2t") as first:
        import vspec.convert.t2t
    with warns("vspec.convert.t2t.from_official_t2t") as second:
        from vspec.convert.t2t import from_official_t2t
    with warns("vspec.train.cli") as third:
        import vspec.train.cli
    with warns("vspec.cli_common") as fourth:
        from vspec.cli_common import printable
    with warns("vspec.convert.OFFICIAL") as fifth:
        from vspec.convert import OFFICIAL
    with warns("vspec.nn.RefinerAttention") as sixth:
        from vspec.nn import RefinerAttention
    with warns("vspec.ops.svpn_exact") as seventh:
        from vspec.ops import svpn_exact
    assert RefinerAttention is new_attention and svpn_exact is new_svpn
    assert vspec.convert.t2t.T2T is from_official_t2t is OFFICIAL["t2t"] is T2T
    assert vspec.train.cli.main is importlib.import_module("vspec.cli.train").main
    assert printable is importlib.import_module("vspec.cli.common").printable
    records = [w for r in (first, second, third, fourth, fifth, sixth, seventh) for w in r]
    assert {w.filename for w in records} == {__file__}


def test_the_download_helpers_of_vspec_pretrained_still_import_from_there():
    # documented under vspec.pretrained before the fetching went to vspec.downloads (issue 54), since issue 56 in
    # vspec.weights.cache and vspec.weights.download: one warning, naming the module the name is in now
    from vspec.weights import cache, download

    for name, module in (("hf_cache", cache), ("drop_path", cache), ("torch_checkpoints", cache),
                         ("sha256", download)):
        new = f"{module.__name__}.{name}"
        pretrained = _quietly("vspec.pretrained")
        with pytest.warns(DeprecationWarning, match=_message(f"vspec.pretrained.{name}", new)) as w:
            got = getattr(pretrained, name)
        assert got is getattr(module, name) and len(w) == 1
    _quietly("vspec.pretrained")
    with pytest.warns(DeprecationWarning, match=_message("vspec.pretrained.sha256", "vspec.weights.download.sha256")) \
            as w:
        from vspec.pretrained import sha256
    assert sha256 is download.sha256 and w[0].filename == __file__


@pytest.mark.parametrize("owner", ["vspec", "vspec.nn", "vspec.ops", "vspec.convert", "vspec.spec", "vspec.cli",
                                   "vspec.train.engine"])
def test_an_unknown_name_is_still_an_error_without_a_warning(owner):
    module = importlib.import_module(owner)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match=f"^module '{owner}' has no attribute 'nope'$"):
            module.nope  # noqa: B018
        with pytest.raises(ModuleNotFoundError, match=f"No module named '{owner}.nope'"):
            importlib.import_module(f"{owner}.nope")


def test_a_removed_name_of_an_old_module_is_an_attribute_error():
    module = _quietly("vspec.convert.t2t")
    with pytest.raises(AttributeError, match="RULES"):
        module.RULES  # noqa: B018


def test_the_changelog_lists_every_move_and_removal():
    lines = (ROOT / "CHANGELOG.md").read_text().splitlines()
    rows = {**_moved.NAMES, **_moved.MODULES}
    missing = [old for old, new in rows.items() if not any(f"`{old}` → `{new}`" in line for line in lines)]
    assert missing == []
    removed = "\n".join(lines[lines.index("### Removed"):])
    assert [n for n in REMOVED if f"`{n}`" not in removed] == []


def test_importing_vspec_imports_no_target():
    code = ("import sys, vspec\n"
            "assert 'torch' not in sys.modules\n"
            "assert not [m for m in sys.modules if m.startswith(('vspec.cli', 'vspec.train', 'vspec.convert', "
            "'vspec.nn', 'vspec.ops')) or m.endswith(('.modules', '.ops', '.convert', '.convert_text'))]")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr


# issue 56 (weights): the public names of main at cdc305b that the weights modules' move to vspec/weights/ displaced
# ("owner: names", each module's __all__ or top-level definitions); the package's attributes are the old modules
OLD_GONE_WEIGHTS = """
vspec: checkpoint checksum downloads hub loading pretrained resample
vspec.checkpoint: CHECKSUM CHUNK CheckpointError FINITE_CHECKED FORMAT MODEL_FIELDS OPTIONAL_FIELDS Scan
    TENSOR_CHECKSUM at_img_size cause check_checkpoint check_fields check_weights load_weights migrate_checkpoint
    model_of nonfinite read read_checkpoint reading save timm_cfg weights_cfg with_checksum
vspec.checksum: CHUNK CONTAINERS checksum children host_bytes tensor_checksum
vspec.downloads: PROBE_SECONDS WeightsUnavailable check_hub_cache drop_path expected_digest fetch hf_cache
    hub_endpoint offline reachable regular_file sha256 tokenizer_folder torch_checkpoints verify vspec_cache
vspec.hub: ALIASES CONFIG DTYPES FORMAT MAX_CONFIG MAX_HEADER WEIGHTS from_pretrained load_folder save_pretrained
vspec.loading: CheckpointError load load_checkpoint
vspec.pretrained: DDP_PREFIX Published RELEASE_GLOBALS cached_folder choose converted converted_folder load_into
    load_pretrained locate params pick pretrained_cfg published published_difference published_model read_state
    tokenizer_path
vspec.resample: resample_state
"""


def test_every_weights_name_of_cdc305b_warns_once_and_is_the_new_object():
    old = _names(OLD_GONE_WEIGHTS)
    assert len(old) == 86
    for name in old:
        owner, _, attr = name.rpartition(".")
        new = _moved.MODULES.get(name) or _moved.NAMES.get(name) or f"{_moved.MODULES[owner]}.{attr}"
        assert new.startswith("vspec.weights."), name
        module = _quietly(owner)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            got = getattr(module, attr)
        if name in _moved.MODULES:  # the alias module of the old one, with the new module's names
            assert got.__name__ == name
        else:
            assert got is _moved.resolve(new), name
        # a moved module's own names come from its new module silently (importing it warned); a name that went
        # elsewhere warns once, naming the module it is in now (no second warning through another old path)
        quiet = name not in _moved.MODULES and name not in _moved.NAMES
        assert [str(w.message) for w in record] == ([] if quiet else [_message(name, new)[1:-1].replace("\\", "")])


def test_the_weights_code_imports_no_old_path():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "import vspec.weights.published, vspec.weights.loading, vspec.factory, vspec.cli.weights\n"
            "import vspec.cli.build, vspec.cli.eval, vspec.cli.label, vspec.cli.train\n"
            "old = ('checkpoint', 'checksum', 'downloads', 'hub', 'loading', 'pretrained', 'resample')\n"
            "import sys; assert not [m for m in sys.modules if m in {f'vspec.{o}' for o in old}]")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr


# issue 56 (the training room, text and token labels): the public names of cdc305b that the moves to
# vspec/train/text/, token_labels/, files.py, faults.py, run_folder.py and validators.py displaced ("owner: names")
OLD_GONE_TRAINING = """
vspec.train: folder labeling names relabel relabel_mix rules wordpiece
vspec.train.checkpoints: RUN_FILES SaveError atomic_copy atomic_save atomic_write_text clean_stale_temps kill_hook
    kill_point
vspec.train.engine: TrainConfig
vspec.train.folder: MODEL_FOLDERS check_fresh jsonl plot prepare refresh_best_folder tensorboard
vspec.train.labeling: LabelError MIN_WIDTH label_maps pending resample save_map score_maps scorer top_k
    write_label_maps
vspec.train.names: GLUE_TASKS run_tokenizer
vspec.train.relabel: LABELS_JSON MAX_RECORD N_COMN cos_reg_term crop_boxes dense_scores image_keys label_path pool
    read_label_map read_record relabel_cross_entropy relabel_pooled_cross_entropy relabel_target soft_cross_entropy
    soft_target_ce_cos_reg
vspec.train.relabel_mix: RelabelMix
vspec.train.rules: CROP ConfigError F32_MAX F32_TINY FINITE Is MEAN OneOf POSITIVE_FLOAT POSITIVE_INT Range STD
    check_normalisation floats ints rule
vspec.train.text: ENTAIL Example GLUE MAX_FIELD MAX_TOKENIZER_FILE MAX_UNKNOWN PAIR RT_FILE RT_LABELS RT_VAL SAMPLE
    SPECIAL TOKENIZER_SUFFIXES Task TextData TextDataset Tokenizer check_tokenizer glue glue_metrics headline
    pad_batch read_glue read_rt_polarity rt_polarity text_datasets text_metrics tokenizer_identity
    tokenizer_mismatch train_wordpiece
vspec.train.token_labels: LABEL_OPS LabelledRandAugment TokenLabels UNMOVED affine_label_map check_label_folder
    check_map crop_plane describe label_op
vspec.train.wordpiece: PREFIX learn word_counts
"""


def test_every_name_the_training_room_split_moved_warns_and_is_the_new_object():
    old = _names(OLD_GONE_TRAINING)
    assert len(old) == 111
    for name in old:
        owner, _, attr = name.rpartition(".")
        if name in _moved.NAMES or name in _moved.MODULES:  # the owner's __getattr__ warns, naming the new place
            new = _moved.NAMES.get(name) or _moved.MODULES[name]
            package = importlib.import_module(owner)
            vars(package).pop(attr, None)  # an old module imported by an earlier name of this loop
            sys.modules.pop(name, None)
            with pytest.warns(DeprecationWarning, match=_message(name, new)) as record:
                got = getattr(package, attr)
            assert record[0].filename == __file__
            assert got is (sys.modules[name] if name in _moved.MODULES else _moved.resolve(new)), name
        else:  # a name of an old module: its new module's (importing the old module warns)
            assert owner in _moved.MODULES, name
            assert getattr(_quietly(owner), attr) is getattr(importlib.import_module(_moved.MODULES[owner]), attr), name


@pytest.mark.parametrize("owner", ["vspec.train", "vspec.train.text", "vspec.train.token_labels",
                                   "vspec.train.checkpoints"])
def test_an_unknown_name_of_a_split_training_module_is_an_error_without_a_warning(owner):
    module = importlib.import_module(owner)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match=f"^module '{owner}' has no attribute 'nope'$"):
            module.nope  # noqa: B018


# issue 56 (a paper is one folder): the public names of main at cdc305b that moved into their family's folder
# (vspec.analysis's figures; vspec.train.recipes' paper recipes stay in RECIPES, vspec.cli.analyze's ANALYSES and
# OUTPUTS are read from the families there)
PAPER_GONE = """
vspec.analysis: analyze attention_maps attention_modules cka_problem default_blocks feature_evolution feature_norms
    head_matrices linear_cka maps_summary msf_problem plot plot_cka plot_maps similarities subspace_similarity
"""


def test_every_name_a_paper_took_into_its_folder_warns_and_is_the_new_object():
    old = _names(PAPER_GONE)
    assert len(old) == 16 and all(n in _moved.NAMES for n in old)
    for name in old:
        owner, _, attr = name.rpartition(".")
        with pytest.warns(DeprecationWarning, match=_message(name, _moved.NAMES[name])):
            got = getattr(importlib.import_module(owner), attr)
        assert got is _moved.resolve(_moved.NAMES[name]) and _moved.NAMES[name].startswith("vspec.models.")
    from vspec.cli import analyze
    from vspec.train import recipes

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert analyze.ANALYSES == ("msf", "cka", "maps")
        assert analyze.OUTPUTS == {"msf": "analysis", "cka": "cka", "maps": "maps"}
        assert list(recipes.RECIPES) == ["deit", "dhvt_cifar", "msf", "refiner", "refiner_advanced", "none",
                                         "compare", "glue"]


# issue 56 (image data, tasks, losses, evaluation): the public names of cdc305b that the split of vspec/train/ into
# data/, tasks/, losses.py and evaluate.py displaced (vspec.train.data's own: its old module's names and the
# DataError it re-exported), and the old vspec.train modules that are gone, derived from that commit
DATA_GONE = """
vspec.train: datasets device_aug gpu_data inputs manifest pack prefetch shards
vspec.train.data: ArrayImages ConvertMode DataError INTERPOLATION MNIST5K_FILE MNIST5K_VAL ResumableSampler
    SyntheticImages build_datasets build_loaders build_transforms cifar10 cifar100 digits eval_crop_ratio image_folder
    mnist5k read_bytes read_image read_mnist5k set_epoch synthetic
vspec.train.datasets: BUILTIN DataError DataSet IMAGE_METRICS MODALITIES Request entry help_text names open_regular
    register_dataset table unregister_dataset
vspec.train.gpu_data: AHEAD CANVAS_MAX DevicePipeline Indexed JPEG WorkerPipeline collate_encoded decode device_batches
vspec.train.device_aug: ColorJitter LEVEL_DENOM RandAugment affine apply_lut autocontrast autocontrast_lut box_mask
    brightness color contrast crop_boxes equalize equalize_lut erase_boxes invert posterize rotate sharpness solarize
    solarize_add to
vspec.train.inputs: KEYS inputs_line resolve_inputs resumed run_pretrained_cfg
vspec.train.shards: Failure MAX_PARTS SHUFFLE_BUFFER ShardLoader ShardStream TRAILER decode shards shuffled
vspec.train.pack: FORMAT IMAGE_SUFFIXES MANIFEST MAX_MEMBER MIN_SHARDS SHARD_BYTES SPLITS clear default_shard_size
    is_shard_name pack scan shard_name
vspec.train.manifest: MAX_COUNT MAX_MANIFEST MAX_NESTING MAX_SHARDS check_manifest close_quietly expand locate
    open_file read_manifest shard_in
vspec.train.prefetch: DeviceNormalise Prefetcher ahead
vspec.train.tasks: RegressionLoss evaluate evaluate_text forward make_criterion to_device token_grid
vspec.cli.eval: evaluate_checkpoint
"""



def test_every_name_the_training_data_split_displaced_is_moved():
    old = _names(DATA_GONE)
    assert len(old) == 123
    # each row warns and is the new object (the tests above)
    rows = [n for n in old if n in _moved.NAMES or n in _moved.MODULES]
    kept = [n for n in old if n not in rows]  # the rest: an old module's names, served by its new module
    assert [n for n in kept if n.rpartition(".")[0] not in _moved.MODULES] == []
    for name in kept:
        owner, _, attr = name.rpartition(".")
        with pytest.warns(DeprecationWarning, match=_message(owner, _moved.MODULES[owner])):
            module = importlib.import_module(owner)
        assert getattr(module, attr) is getattr(importlib.import_module(_moved.MODULES[owner]), attr)
        sys.modules.pop(owner)
        vars(sys.modules[owner.rpartition(".")[0]]).pop(owner.rpartition(".")[2], None)
    for name in rows:
        owner, _, attr = name.rpartition(".")
        new = _moved.NAMES.get(name) or _moved.MODULES[name]
        with pytest.warns(DeprecationWarning, match=_message(name, new)):
            got = getattr(_quietly(owner), attr)
        assert _same(got, new) if name in _moved.NAMES else got.__name__ == name
        sys.modules.pop(name, None)
        vars(sys.modules[owner]).pop(attr, None) if name in _moved.MODULES else None


# issue 56 (benchmarks and names): the public names of cdc305b that left their place, derived from that commit
# (vspec/nn/model.py's top-level definitions, vspec.nn's __all__): the blocks and the stage went to vspec/nn/blocks.py,
# and Transformer's old name VisionTransformer is served by the table
OLD_GONE_56_NAMES = """
vspec.nn: VisionTransformer
vspec.nn.model: Block Carry NO_STATE PostNormBlock Stage VisionTransformer
"""


def test_the_names_issue_56_displaced_from_nn_warn_and_are_the_new_objects():
    old = _names(OLD_GONE_56_NAMES)
    assert [n for n in old if n not in _moved.NAMES] == []
    for name in old:
        owner, _, attr = name.rpartition(".")
        module = importlib.import_module(owner)
        with pytest.warns(DeprecationWarning, match=_message(name, _moved.NAMES[name])):
            got = getattr(module, attr)
        assert _same(got, _moved.NAMES[name])


# issue 62 (the core free of papers): the public top-level definitions of 273c2d5 no longer at their place, derived
# from that commit: Refiner's map refiner and maps key and SoT's two roles went to their families, the recipes' bound
# to the spec layer with `Recipe` (which vspec.train.recipes and vspec.analysis still import, as `Analysis`)
OLD_GONE_62_NAMES = """
vspec.nn.layers: MapRefiner
vspec.spec.kinds: PoolKind ReprNormKind
vspec.spec.layout: MAPS
vspec.train.recipes: MAX_EPOCHS
"""


def test_the_names_issue_62_took_out_of_the_core_warn_and_are_the_new_objects():
    old = _names(OLD_GONE_62_NAMES)
    assert [n for n in old if n not in _moved.NAMES] == []
    for name in old:
        owner, _, attr = name.rpartition(".")
        with pytest.warns(DeprecationWarning, match=_message(name, _moved.NAMES[name])):
            got = getattr(importlib.import_module(owner), attr)
        assert _same(got, _moved.NAMES[name])
    from vspec import analysis, spec, train

    assert analysis.Analysis is spec.paper.Analysis and train.recipes.Recipe is train.Recipe is spec.paper.Recipe
