"""Spec format 3 (the block is a role): the files, checkpoints and model folder the format-2 release wrote
(tests/data/v2, see its README) load in this one as the same models, with the same outputs; a format-2 training
checkpoint (its best score named `best_top1`) evaluates and resumes; each block option of format 2 becomes its
block kind, and a block that set two of them is refused by its path."""

import json
import shutil
from pathlib import Path

import pytest
import torch

import vspec
from tests.helpers.checks import STORED_ATOL, assert_close_to_stored
from vspec.cli.eval import main as eval_main
from vspec.cli.train import main as train_main
from vspec.spec import VERSION, SpecError, from_dict, from_json, from_toml
from vspec.spec.migrate import upgrade

ROOT = Path(__file__).resolve().parents[2]
V2 = ROOT / "tests/data/v2"
V2_SPECS = sorted(V2.glob("*.json")) + sorted(V2.glob("*.toml"))
CHECKPOINTS = ["dhvt_head_tokens", "conformer_coupled", "bert_post_norm_sot", "refiner_adjusted", "gpt_causal",
               "train_last"]
KINDS = {"dhvt_head_tokens": "head_tokens", "conformer_coupled": "coupled", "bert_post_norm_sot": "post_norm",
         "refiner_adjusted": "adjusted", "gpt_causal": "post_norm", "train_last": "head_tokens"}


# presets changed on purpose since that release: the change undone (issue 54: Refined-ViT's dense presets set
# MixToken, as their released factories and LV-ViT's presets)
CHANGED_SINCE = {f"refined_vit_{size}_dense": {"head.dense.mix_token": False} for size in "sml"}


@pytest.mark.parametrize("path", V2_SPECS, ids=lambda p: p.name)
def test_format_2_spec_files_load_as_the_same_models(path):
    old = from_json(path.read_text()) if path.suffix == ".json" else from_toml(path.read_text())
    assert old == vspec.override(vspec.load_spec(ROOT / f"specs/{path.stem}.py"), CHANGED_SINCE.get(path.stem, {}))
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        assert data["version"] == 2  # really the old format
        blocks = [data["block"]] if "block" in data else [s["block"] for s in data["stages"]]
        assert all("kind" not in b for entry in blocks for b in (entry if isinstance(entry, list) else [entry]))


# the presets added since that release (LV-ViT: of kinds format 2 did not have)
NEWER_PRESETS = {"lvvit_t", "lvvit_s", "lvvit_s_384", "lvvit_m", "lvvit_m_384", "lvvit_m_448", "lvvit_l",
                 "lvvit_l_448", "lvvit_l_512", "compare_vit_dense"}


def test_every_format_2_preset_is_covered():
    presets = {p.stem for p in (ROOT / "specs").glob("*.py")}
    assert {p.stem for p in V2.glob("*.json")} == presets - NEWER_PRESETS and NEWER_PRESETS <= presets
    assert len(list(V2.glob("*.toml"))) == len(list(V2.glob("*.json"))) == 83  # every preset of that release


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_format_2_checkpoints_reproduce_their_outputs(name):
    """vspec.load rebuilds each block as its kind and computes what the format-2 release computed (within
    STORED_ATOL: another machine's kernels); a wrong mapping moves the outputs by far more (every floating state
    entry was perturbed by U(0, 0.1); checked on one matrix whose rows are flipped)."""
    ref = torch.load(V2 / "outputs.pt", weights_only=True)[name]
    raw = torch.load(V2 / f"{name}.pt", weights_only=True)
    assert json.loads(raw["spec"])["version"] == 2
    model = vspec.load(V2 / f"{name}.pt").eval()
    assert {b.kind for b in model.spec.blocks} >= {KINDS[name]}
    assert set(model.state_dict()) == set(raw["state_dict"])  # the keys are format 2's
    with torch.no_grad():
        assert_close_to_stored(model(ref["x"]), ref["y"])
        proj = model.get_parameter("stages.0.blocks.0.attn.proj.weight")
        proj.copy_(proj.flip(0))
        assert (model(ref["x"]) - ref["y"]).abs().max() > 10 * STORED_ATOL


def test_a_format_2_model_folder_loads(tmp_path):
    ref = torch.load(V2 / "outputs.pt", weights_only=True)["folder_dhvt"]
    config = json.loads((V2 / "folder_dhvt" / "config.json").read_text())
    assert config["spec"]["version"] == 2 and "kind" not in config["spec"]["block"]
    for model in (vspec.from_pretrained(V2 / "folder_dhvt"), vspec.create_model(V2 / "folder_dhvt")):
        with torch.no_grad():
            assert_close_to_stored(model.eval()(ref["x"]), ref["y"])
        assert model.spec.block.kind == "head_tokens"
    again = vspec.save_pretrained(vspec.from_pretrained(V2 / "folder_dhvt"), tmp_path / "again")
    assert json.loads((again / "config.json").read_text())["spec"]["version"] == VERSION


def test_a_format_2_training_checkpoint_evaluates_and_resumes(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(V2 / "train_last.pt", out / "last.pt")
    raw = torch.load(V2 / "train_last.pt", weights_only=True)
    assert "best_top1" in raw and "best_score" not in raw  # the name before it was one for every task
    spec = tmp_path / "spec.json"  # the spec the run was started with, as the old release wrote it
    spec.write_text(raw["spec"])
    assert eval_main([str(out / "last.pt"), "--data", "synthetic", "--synthetic-size", "64", "--seed", "1",
                      "--device", "cpu", "--ema"]) == 0
    assert train_main([str(spec), "--data", "synthetic", "--synthetic-size", "64", "--out", str(out), "--epochs", "3",
                       "--batch-size", "16", "--ema-decay", "0.9", "--device", "cpu", "--seed", "1", "--resume"]) == 0
    ckpt = torch.load(out / "last.pt", weights_only=True)
    assert ckpt["epoch"] == 3 and json.loads(ckpt["spec"])["version"] == VERSION
    assert [m["epoch"] for m in ckpt["metrics"]] == [1, 2, 3]  # the old run's history goes on
    assert ckpt["best_score"] >= raw["best_top1"]


def v2_block(**options):
    return {"attention": {"kind": "mhsa", "heads": 2}, "ffn": {"kind": "mlp"}, "norm": {"kind": "layernorm"},
            "layer_scale": None, "head_tokens": None, "adjust_ratio": 1.0, "post_norm": False, "conv": None,
            **options}


def v2_model(block) -> dict:
    return {"version": 2, "embedder": {"kind": "patch", "patch_size": 4}, "block": block, "depth": 2, "dim": 16,
            "img_size": 16, "num_classes": 3}


@pytest.mark.parametrize("options,kind,kept", [
    ({}, "pre_norm", {}),
    ({"post_norm": True}, "post_norm", {}),
    ({"head_tokens": {"norm": {"kind": "layernorm", "eps": 1e-5}}}, "head_tokens",
     {"head_tokens": {"norm": {"kind": "layernorm", "eps": 1e-5}}}),
    ({"adjust_ratio": 0.5}, "adjusted", {"adjust_ratio": 0.5}),
    ({"conv": {"width": 16}}, "coupled", {"conv": {"width": 16}}),
])
def test_each_format_2_block_option_becomes_its_kind(options, kind, kept):
    data, _ = upgrade(v2_model(v2_block(**options)))
    expected = {"kind": kind, "attention": {"kind": "mhsa", "heads": 2}, "ffn": {"kind": "mlp"},
                "norm": {"kind": "layernorm"}, "layer_scale": None, **kept}
    assert data["block"] == expected
    listed, _ = upgrade({**v2_model([v2_block(), v2_block(**options)]), "depth": 2})
    assert [b["kind"] for b in listed["block"]] == ["pre_norm", kind]
    staged, _ = upgrade({"version": 2, "embedder": {"kind": "patch", "patch_size": 4},
                         "stages": [{"depth": 1, "dim": 16, "block": v2_block(**options)}]})
    assert staged["stages"][0]["block"]["kind"] == kind
    if kind in ("pre_norm", "post_norm", "adjusted"):  # (the other two need a fitting body)
        assert type(from_dict(v2_model(v2_block(**options))).block).kind == kind


@pytest.mark.parametrize("options,path,message", [
    ({"post_norm": True, "adjust_ratio": 0.5}, "block", "with post_norm and adjust_ratio has no kind"),
    ({"head_tokens": {}, "conv": {"width": 16}}, "block", "with head_tokens and conv has no kind"),
    ({"post_norm": "yes"}, "block.post_norm", "must be bool, got 'yes'"),
    ({"adjust_ratio": True}, "block.adjust_ratio", "must be float, got True"),
])
def test_a_format_2_block_of_no_kind_is_refused_by_its_path(options, path, message):
    with pytest.raises(SpecError) as info:
        from_dict(v2_model(v2_block(**options)))
    assert info.value.path == path and message in info.value.message
    with pytest.raises(SpecError) as info:
        from_dict({**v2_model([v2_block(), v2_block(**options)])})
    assert info.value.path == path.replace("block", "block.1", 1)
