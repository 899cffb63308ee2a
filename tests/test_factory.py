"""vspec.create_model (timm's factory), features_only and prune_intermediate_layers."""

import copy
import json
import warnings
from pathlib import Path

import attrs
import pytest
import timm  # vspec[train], part of vspec[dev]: features_only's FeatureInfo is timm's
import torch

import vspec
from vspec.factory import FeatureModel, register_timm
from vspec.nn.vit import PrunedHead
from vspec.spec import SpecError, load_spec, override, to_json
from vspec.weights.checkpoint import CheckpointError

SPECS = Path(__file__).resolve().parents[1] / "specs"
# DeiT-Ti cut to 5 blocks at 64 px: width 192, 16 x 16 patches -> a 4 x 4 grid
TINY = {"depth": 5, "img_size": 64}
# Swin-T cut to one block per stage at widths 32 x 2^i, heads 1, 2, 4, 8, window 4 at 128 px: 4 x 4 patches,
# then a 2 x 2 merge into each later stage -> grids 32, 16, 8, 4
SWIN_DIMS, SWIN_HEADS = (32, 64, 128, 256), (1, 2, 4, 8)
SWIN = {"img_size": 128, **{k: v for i, (d, h) in enumerate(zip(SWIN_DIMS, SWIN_HEADS)) for k, v in {
    f"stages.{i}.depth": 1, f"stages.{i}.dim": d, f"stages.{i}.block.attention.heads": h,
    f"stages.{i}.block.attention.window": 4}.items()}}

torch.set_num_threads(2)


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text
    return text


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    model = vspec.create_model("deit_tiny", depth=2, img_size=32, num_classes=4)
    return vspec.save(model, tmp_path_factory.mktemp("ckpt") / "tiny.pt")


# ---------------------------------------------------------------- sources and overrides
def test_preset_name_with_overrides():
    model = vspec.create_model("deit_tiny", num_classes=7, img_size=32, depth=2, **{"block.attention.heads": 4})
    expected = override(load_spec(SPECS / "deit_tiny.py"), {"num_classes": 7, "img_size": [32, 32], "depth": 2,
                                                             "block.attention.heads": 4})
    assert model.spec == expected
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)
    assert vspec.create_model("deit_tiny", img_size=(32, 48), depth=1).spec.img_size == (32, 48)


def test_spec_files(tmp_path):
    spec = override(load_spec(SPECS / "deit_tiny.py"), {"depth": 1, "img_size": [32, 32]})
    (tmp_path / "s.json").write_text(to_json(spec))
    (tmp_path / "s.py").write_text("from vspec.spec import from_json\nfrom pathlib import Path\n"
                                   "SPEC = from_json((Path(__file__).parent / 's.json').read_text())\n")
    for file in ("s.json", "s.py"):
        assert vspec.create_model(tmp_path / file).spec == spec
        assert vspec.create_model(str(tmp_path / file), num_classes=3).spec.num_classes == 3


def test_search_path(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text("from vspec.spec import MHSA, Block, Model, PatchEmbed\n"
                                      "SPEC = Model(embedder=PatchEmbed(patch_size=8), img_size=16, depth=1, dim=32,"
                                      " block=Block(attention=MHSA(heads=2)))\n")
    monkeypatch.setenv("VSPEC_SPECS", str(tmp_path))
    assert vspec.create_model("mine").spec.dim == 32
    assert vspec.create_model("deit_tiny", depth=1, img_size=32).spec.dim == 192  # the repository's still


def test_checkpoint_keeps_spec_and_weights(checkpoint):
    saved = torch.load(checkpoint, weights_only=True)["state_dict"]
    model = vspec.create_model(checkpoint).eval()
    assert model.spec.num_classes == 4 and model.spec.depth == 2
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(model(x), vspec.load(checkpoint).eval()(x))
    assert vspec.create_model(checkpoint, pretrained=True, drop_path=0.1).spec.drop_path == 0.1


def test_checkpoint_with_other_classes_keeps_the_body(checkpoint):
    saved = torch.load(checkpoint, weights_only=True)["state_dict"]
    model = vspec.create_model(str(checkpoint), num_classes=9)
    assert model.spec.num_classes == 9 and model.head.fc.weight.shape == (9, 192)
    body = {k: v for k, v in model.state_dict().items() if not k.startswith("head.")}
    assert body and all(torch.equal(v, saved[k]) for k, v in body.items())
    assert set(body) == {k for k in saved if not k.startswith("head.")}
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 9)


def test_model_folder_like_its_checkpoint(checkpoint, tmp_path):
    vspec.save_pretrained(vspec.load(checkpoint), tmp_path / "folder")
    from_folder, from_pt = vspec.create_model(tmp_path / "folder").eval(), vspec.create_model(checkpoint).eval()
    x = torch.randn(2, 3, 32, 32)
    assert from_folder.spec == from_pt.spec and torch.equal(from_folder(x), from_pt(x))
    assert vspec.create_model(str(tmp_path / "folder"), num_classes=9)(x).shape == (2, 9)


def test_checkpoint_override_that_changes_weights_is_one_line(checkpoint):
    with pytest.raises(CheckpointError) as e:
        vspec.create_model(checkpoint, dim=96)
    assert str(checkpoint) in one_line(e) and "do not fit" in str(e.value)


def test_new_img_size_resamples_the_checkpoint(checkpoint):
    """A checkpoint at another img_size: the model `vspec.load(path, img_size=)` gives (resampled
    weights, vspec.weights.resample)."""
    bigger = vspec.create_model(checkpoint, img_size=48).eval()
    assert bigger.spec.img_size == (48, 48) and bigger.pos_embed.shape == (1, 1 + 3 * 3, 192)  # patch 16
    x = torch.randn(1, 3, 48, 48)
    assert torch.equal(bigger(x), vspec.load(checkpoint, img_size=48).eval()(x))


def test_refusals_are_one_line(tmp_path):
    with pytest.raises(SpecError) as e:
        vspec.create_model("deit_tiyn")
    assert "unknown preset 'deit_tiyn'" in one_line(e) and "deit_tiny" in str(e.value)
    with pytest.raises(SpecError) as e:  # offline (conftest), the caches empty: where to put the file
        vspec.create_model("deit_tiny", pretrained=True)
    assert "download https://huggingface.co/timm/deit_tiny_patch16_224.fb_in1k" in one_line(e)
    with pytest.raises(SpecError) as e:
        vspec.create_model("sot_tiny", pretrained=True)
    assert "declares no published weights" in one_line(e)
    with pytest.raises(CheckpointError) as e:  # a folder without config.json
        vspec.create_model(tmp_path)
    assert "config.json" in one_line(e)
    with pytest.raises(CheckpointError) as e:
        vspec.create_model(tmp_path / "absent.pt")
    one_line(e)


# ---------------------------------------------------------------- features_only
def test_features_only_isotropic_matches_timm():
    """The interop page's example (Factory): out_indices, channels, reductions and map shapes."""
    x = torch.randn(2, 3, 64, 64)
    net = vspec.create_model("deit_tiny", features_only=True, **TINY)
    info = net.feature_info
    assert isinstance(info, timm.models._features.FeatureInfo)
    assert net.out_indices == [2, 3, 4]  # timm's default for a ViT: the last 3 blocks
    assert info.channels() == [192] * 3 and info.reduction() == [16] * 3
    assert info.module_name() == ["stages.0.blocks.2", "stages.0.blocks.3", "stages.0.blocks.4"]
    assert [tuple(f.shape) for f in net(x)] == [(2, 192, 4, 4)] * 3
    ref = timm.create_model("vit_tiny_patch16_224", features_only=True, depth=5, img_size=64)
    assert list(ref.feature_info.out_indices) == net.out_indices
    assert ref.feature_info.channels() == info.channels() and ref.feature_info.reduction() == info.reduction()
    assert [f.shape for f in ref(x)] == [f.shape for f in net(x)]


def test_features_only_hierarchical_matches_timm():
    x = torch.randn(2, 3, 128, 128)
    net = vspec.create_model("swin_tiny", features_only=True, **SWIN)
    info = net.feature_info
    assert net.out_indices == [0, 1, 2, 3]  # timm's default for Swin: every stage
    assert info.channels() == list(SWIN_DIMS) and info.reduction() == [4, 8, 16, 32]
    assert info.module_name() == [f"stages.{i}" for i in range(4)]
    assert [tuple(f.shape) for f in net(x)] == [(2, c, 128 // r, 128 // r) for c, r in zip(SWIN_DIMS, (4, 8, 16, 32))]
    ref = timm.create_model("swin_tiny_patch4_window7_224", features_only=True, img_size=128, window_size=4,
                            embed_dim=32, depths=(1, 1, 1, 1), num_heads=SWIN_HEADS)
    assert ref.feature_info.channels() == info.channels() and ref.feature_info.reduction() == info.reduction()
    assert [f.permute(0, 3, 1, 2).shape for f in ref(x)] == [f.shape for f in net(x)]  # timm's Swin gives NHWC


@pytest.mark.parametrize("preset, overrides, indices, kept", [
    ("deit_tiny", TINY, (0, -2), [0, 3]),
    ("swin_tiny", SWIN, (-3, 1), [1]),  # one index twice: one feature
    ("conformer_ti", {}, (0, 1), [0, 1]),  # a two-branch body: the map goes through the kept blocks
])
def test_features_only_out_indices_equal_the_unpruned_taps(preset, overrides, indices, kept):
    torch.manual_seed(0)
    model = vspec.create_model(preset, **overrides).eval()
    x = model.example_input(2)
    expected = model.forward_intermediates(x, indices, intermediates_only=True)
    net = FeatureModel(copy.deepcopy(model), indices).eval()
    assert net.out_indices == kept
    assert net.feature_info.channels() == [model.feature_info[i]["num_chs"] for i in kept]
    assert all(torch.equal(a, b) for a, b in zip(net(x), expected, strict=True))
    assert n_params(net) < n_params(model)


# ---------------------------------------------------------------- prune_intermediate_layers
@pytest.mark.parametrize("preset, overrides, indices, kept, norm", [
    ("deit_tiny", TINY, 2, [3, 4], True),  # the last block kept: the final norm applies
    ("deit_tiny", TINY, [1, -4], [1, 1], False),  # timm's answer: the indices as given, counted from the start
    ("swin_tiny", SWIN, [0, 2], [0, 2], False),
    ("swin_tiny", SWIN, [1], [1], True),  # the final norm is the last stage's, which is gone: not applied
])
def test_prune_intermediate_layers(preset, overrides, indices, kept, norm):
    torch.manual_seed(0)
    model = vspec.create_model(preset, **overrides).eval()
    x = model.example_input(2)
    before = model.forward_intermediates(x, indices, norm=norm, intermediates_only=True)
    total = n_params(model)
    assert model.prune_intermediate_layers(indices, prune_norm=not norm) == kept
    after = model.forward_intermediates(x, kept, norm=norm, intermediates_only=True)
    assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True))
    assert n_params(model) < total and isinstance(model.head, PrunedHead)
    assert len(model.feature_info) == max(kept) + 1
    assert sum(len(s.blocks) for s in model.stages) == max(kept) + 1  # a DeiT's blocks, one block a Swin stage
    assert isinstance(model.norm, torch.nn.LayerNorm) == norm
    with pytest.raises(ValueError, match="pruned"):
        model.reset_classifier(3)


# ---------------------------------------------------------------- timm's registry, opt-in
def test_register_timm():
    names = register_timm()
    assert "vspec_deit_tiny" in names and "vspec_swin_tiny" in timm.list_models("vspec_*")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # timm warns when a name is registered again: the second call must not
        assert register_timm() == names
    model = timm.create_model("vspec_deit_tiny", num_classes=5, depth=2, img_size=32)
    assert model.spec == vspec.create_model("deit_tiny", num_classes=5, depth=2, img_size=32).spec
    net = timm.create_model("vspec_deit_tiny", features_only=True, out_indices=(1,), **TINY)
    assert net.feature_info.channels() == [192] and net.feature_info.reduction() == [16]
    with pytest.raises(SpecError, match="put it at"):  # offline (conftest): vspec's pretrained path, one line
        timm.create_model("vspec_deit_tiny", pretrained=True)
    with pytest.raises(ValueError, match="local path"):  # why the names take no '/': timm reads it as a path
        timm.create_model("vspec/deit_tiny")


# ---------------------------------------------------------------- timm's standard keywords (issue 54, item 11)
# what timm's train.py passes to create_model on its defaults (timm.create_model drops the None ones itself;
# scriptable and checkpoint_path are timm's own there)
TRAIN_PY = {"in_chans": 3, "num_classes": None, "drop_rate": 0.0, "drop_path_rate": None, "drop_block_rate": None,
            "global_pool": None, "bn_momentum": None, "bn_eps": None, "scriptable": False, "checkpoint_path": ""}


def test_timm_keywords_set_the_spec():
    plain = vspec.create_model("deit_tiny", depth=1, img_size=32)
    assert vspec.create_model("deit_tiny", depth=1, img_size=32, **TRAIN_PY).spec == plain.spec  # None: not given
    model = vspec.create_model("deit_tiny", depth=1, img_size=32, drop_rate=0.1, drop_path_rate=0.2,
                               attn_drop_rate=0.3, proj_drop_rate=0.05, in_chans=1, global_pool="avg")
    block = plain.spec.block
    assert model.spec == attrs.evolve(plain.spec, drop_path=0.2, in_chans=1, head=vspec.GAPHead(drop=0.1),
                                      block=attrs.evolve(block, attention=attrs.evolve(block.attention, attn_drop=0.3,
                                                                                       proj_drop=0.05),
                                                         ffn=attrs.evolve(block.ffn, drop=0.05)))
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 1000)
    # every stage of a hierarchical body, a nested head (Conformer's token head)
    swin = vspec.create_model("swin_tiny", attn_drop_rate=0.1, **SWIN)
    assert [s.block.attention.attn_drop for s in swin.spec.stages] == [0.1] * 4
    conformer = load_spec(SPECS / "conformer_ti.py")
    assert vspec.create_model("conformer_ti", drop_rate=0.2).spec.head == attrs.evolve(
        conformer.head, tokens=attrs.evolve(conformer.head.tokens, drop=0.2))
    # BatchNorms (LV-ViT's convolutional stem) take timm's bn_momentum and bn_eps
    lvvit = vspec.create_model("lvvit_t", depth=1, img_size=32, bn_momentum=0.01, bn_eps=1e-3)
    norms = [m for m in lvvit.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and {(m.momentum, m.eps) for m in norms} == {(0.01, 1e-3)}


def test_timm_checkpoint_path_loads_its_weights(checkpoint):
    model = vspec.create_model("deit_tiny", depth=2, img_size=32, num_classes=4, checkpoint_path=str(checkpoint))
    saved = torch.load(checkpoint, weights_only=True)["state_dict"]
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
    with pytest.raises(CheckpointError, match="do not fit"):  # another model's weights: named, one line
        vspec.create_model("deit_tiny", depth=3, img_size=32, num_classes=4, checkpoint_path=checkpoint)


@pytest.mark.parametrize("name, kwargs, needle", [
    ("deit_tiny", {"drop_block_rate": 0.1}, "drop_block_rate: 0.1: vspec models have no DropBlock"),
    ("deit_tiny", {"bn_eps": 1e-3}, "bn_eps: 0.001: the model has no BatchNorm"),
    ("lvvit_t", {"bn_momentum": 2.0}, "bn_momentum: 2.0: a BatchNorm momentum is a finite number in [0, 1]"),
    ("deit_tiny", {"scriptable": True}, "scriptable: True: vspec models are not TorchScript-scriptable"),
    ("deit_tiny", {"scriptable": "yes"}, "scriptable: 'yes': vspec models are not TorchScript-scriptable"),
    ("deit_tiny", {"checkpoint_path": 7}, "checkpoint_path: 7: a path to a vspec checkpoint (.pt) or model folder"),
    ("deit_tiny", {"global_pool": "max"}, "global_pool: 'max': the model pools with its class_token head"),
    ("lvvit_t", {"global_pool": "avg"}, "global_pool: 'avg': the model pools with its class_token head (dense)"),
    ("simplevit_ti", {"global_pool": "token"}, "global_pool: 'token': the model pools with its gap head (norm)"),
    ("deit_tiny", {"drop_rate": 1.5}, "drop_rate: 1.5: head.drop: must be < 1"),
    ("deit_tiny", {"drop_path_rate": -0.1}, "drop_path_rate: -0.1: drop_path: must be >= 0"),
])
def test_timm_keywords_without_a_meaning_are_refused_in_one_line(name, kwargs, needle):
    with pytest.raises(SpecError) as e:
        vspec.create_model(name, depth=1, **kwargs)
    assert one_line(e).startswith(needle), one_line(e)


def test_timm_create_model_takes_train_pys_keywords():
    assert vspec.register_timm is register_timm  # at the top level too
    register_timm()
    model = timm.create_model("vspec_deit_tiny", **{**TRAIN_PY, "num_classes": 5, "drop_path_rate": 0.1},
                              depth=2, img_size=32)
    assert model.spec == vspec.create_model("deit_tiny", num_classes=5, depth=2, img_size=32, drop_path=0.1).spec
    # timm hands `name.tag`'s tag over as pretrained_cfg: it names the preset's weights, as vspec's `name.tag` does
    tagged = timm.create_model("vspec_vit_base.deit_fb_in1k", depth=1)
    assert tagged.pretrained_cfg["tag"] == "deit_fb_in1k"
    assert tagged.pretrained_cfg["crop_pct"] == vspec.load_weights_table(SPECS / "vit_base.py")[
        "deit_fb_in1k"].preprocess.crop_pct
    with pytest.raises(SpecError, match="has no weights tagged 'nope'"):
        timm.create_model("vspec_deit_tiny.nope", depth=1)
    # train.py's --pretrained-path: timm's own weights source, which vspec does not read: refused, not ignored
    with pytest.raises(SpecError) as e:
        timm.create_model("vspec_deit_tiny", pretrained=True,
                          pretrained_cfg_overlay={"file": "w.pth", "num_classes": -1})
    assert one_line(e).startswith("pretrained_cfg_overlay file: a vspec preset's weights are its published ones")


def test_timm_create_model_refuses_scriptable_as_vspecs_does():
    """timm keeps `scriptable` (its layer config, `timm.layers.is_scriptable()`): refused, with the value given."""
    register_timm()
    for value in (True, "yes", 1):
        with pytest.raises(SpecError) as e:
            timm.create_model("vspec_deit_tiny", scriptable=value, depth=1)
        assert one_line(e).startswith(f"scriptable: {value!r}: vspec models are not TorchScript-scriptable")
    assert timm.create_model("vspec_deit_tiny", scriptable=False, depth=1).spec.depth == 1


CKPT_MODEL = {"depth": 2, "img_size": 32, "num_classes": 4}  # the `checkpoint` fixture's model


def test_timm_checkpoint_path_passes_vspecs_checks_and_timms_loader_loads_the_same(checkpoint, tmp_path):
    """timm loads `checkpoint_path` itself once the entrypoint has returned (timm.models.load_checkpoint): the
    entrypoint reads it from timm's call, loads it through vspec's checks first, and refuses in one line a file
    that timm's loader would read otherwise or not at all."""
    from timm.models import load_checkpoint as timm_load

    from vspec.weights.checkpoint import with_checksum

    register_timm()
    saved = torch.load(checkpoint, weights_only=True)
    model = timm.create_model("vspec_deit_tiny", checkpoint_path=str(checkpoint), **CKPT_MODEL)
    assert model.state_dict().keys() == saved["state_dict"].keys()
    assert all(torch.equal(v, saved["state_dict"][k]) for k, v in model.state_dict().items())
    # NaN weights: timm's loader alone loads them; vspec's checks refuse the file first
    nan = {k: v.clone() for k, v in saved["state_dict"].items()}
    nan["cls_token"][0, 0, 0] = float("nan")
    torch.save({**saved, "state_dict": nan}, tmp_path / "nan.pt")
    plain = vspec.create_model("deit_tiny", **CKPT_MODEL)
    timm_load(plain, str(tmp_path / "nan.pt"))
    assert plain.cls_token.isnan().any()
    # an EMA entry timm's loader takes before "state_dict", the checksum right: vspec loads "state_dict"
    torch.save(with_checksum({**{k: v for k, v in saved.items() if k != "sha256"}, "state_dict_ema": nan}),
               tmp_path / "ema.pt")
    assert torch.equal(vspec.load(tmp_path / "ema.pt").cls_token, saved["state_dict"]["cls_token"])
    (tmp_path / "w.npz").write_bytes(checkpoint.read_bytes())  # a vspec checkpoint timm reads as numpy's
    vspec.save_pretrained(vspec.create_model("deit_tiny", **CKPT_MODEL), tmp_path / "folder")
    for path, needle in ((tmp_path / "nan.pt", "nan.pt: "),
                         (tmp_path / "ema.pt", "checkpoint_path: {}: timm's loader, which reads it again after "
                                               "vspec's checks, would load other weights"),
                         (tmp_path / "w.npz", "checkpoint_path: {}: timm's loader, which reads it again after "
                                              "vspec's checks, cannot (NotImplementedError"),
                         (tmp_path / "folder", "checkpoint_path: {}: a model folder")):
        with pytest.raises(SpecError) as e:
            timm.create_model("vspec_deit_tiny", checkpoint_path=str(path), **CKPT_MODEL)
        assert needle.format(path) in one_line(e), one_line(e)


# ---------------------------------------------------------------- pretrained_cfg (issue 54, item 6)
def test_every_model_has_a_pretrained_cfg_the_declared_one_or_the_marked_default(tmp_path):
    from timm.data import DEFAULT_CROP_PCT, resolve_data_config

    declared = next(iter(vspec.load_weights_table(SPECS / "lvvit_m.py").values())).preprocess
    model = vspec.create_model("lvvit_m")  # no published weights held: the preprocessing its weights declare
    data = resolve_data_config(model=model)
    assert (data["crop_pct"], data["mean"], data["std"], data["interpolation"]) == (
        declared.crop_pct, declared.mean, declared.std, declared.interpolation)
    assert model.pretrained_cfg["vspec_inputs"] == "declared" and model.default_cfg is model.pretrained_cfg
    register_timm()
    small = timm.create_model("vspec_lvvit_m", depth=1, img_size=64)  # at the model's own size
    assert resolve_data_config(model=small)["input_size"] == (3, 64, 64)
    assert resolve_data_config(model=small)["crop_pct"] == declared.crop_pct
    # a spec without published weights: vspec's default, marked so; so is a model that builds from a spec alone
    spec = load_spec(SPECS / "deit_tiny.py")
    (tmp_path / "s.json").write_text(to_json(override(spec, {"depth": 1, "img_size": [32, 32]})))
    for model in (vspec.create_model(tmp_path / "s.json"), vspec.build(override(spec, {"depth": 1})),
                  vspec.create_model("demo_digits")):
        cfg = model.pretrained_cfg
        assert cfg["vspec_inputs"] == "default" and cfg["crop_pct"] == DEFAULT_CROP_PCT
        assert cfg["input_size"] == (model.spec.in_chans, *model.spec.img_size)
        assert resolve_data_config(model=model)["input_size"] == cfg["input_size"]
    gray = vspec.create_model("deit_tiny", depth=1, in_chans=1).pretrained_cfg  # not the 3-channel weights' inputs
    assert gray["vspec_inputs"] == "default" and gray["mean"] == gray["std"] == (0.5,)
    # saved, inputs the model's weights were not trained on are not written as theirs
    vspec.save(vspec.create_model("lvvit_t", depth=1), tmp_path / "m.pt")
    assert "pretrained_cfg" not in torch.load(tmp_path / "m.pt", weights_only=True)
    vspec.save_pretrained(vspec.create_model("lvvit_t", depth=1), tmp_path / "folder")
    assert "pretrained_cfg" not in json.loads((tmp_path / "folder" / "config.json").read_text())
    assert vspec.from_pretrained(tmp_path / "folder").pretrained_cfg["vspec_inputs"] == "default"
