"""Finding models as a timm user does (issue 44, item 4): `vspec.list_models` (fnmatch, `pretrained=True` as
`name.tag`), `vspec list`, timm's `name.tag` wherever a preset is named, and `load_spec` of a preset's name."""

import fnmatch
from pathlib import Path

import pytest
import torch

import vspec
from tests.helpers.caches import hub_put, safetensors_bytes
from tests.helpers.checks import perturbed
from vspec.cli import main
from vspec.cli.weights import rows
from vspec.factory import presets
from vspec.weights.published import WeightsUnavailable


def test_list_models_matches_as_timm_and_lists_every_published_tag():
    sot = vspec.list_models("*sot*")
    assert "sot_tiny" in sot and "deit_tiny" not in sot and sot == sorted(sot)
    assert all(fnmatch.fnmatch(n, "*sot*") for n in sot)
    examples = {"demo_digits", "demo_text", "compare_vit", "compare_sot", "compare_dhvt", "compare_refiner",
                "compare_vit_dense"}  # what `make demo` and `vspec compare` train: no architecture (issue 54)
    assert set(vspec.list_models()) == set(presets()) - examples
    assert set(vspec.list_models(examples=True)) == set(presets())
    assert vspec.list_models("compare_*") == [] and vspec.list_models("compare_s*", examples=True) == ["compare_sot"]
    published = vspec.list_models(pretrained=True)
    assert set(published) == {f"{name}.{tag}" for name, tag, _ in rows()}  # what `vspec weights` lists
    assert "vit_base.augreg2_in21k_ft_in1k" in published and "sot_tiny" not in {p.split(".")[0] for p in published}
    assert vspec.list_models("deit_tiny.*", pretrained=True) == ["deit_tiny.fb_in1k"]
    assert vspec.list_models("*sot*", pretrained=True) == []


def test_vspec_list_prints_family_counts_and_tags(capsys):
    assert main(["list", "deit_tiny*"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = next(line.split() for line in out if line.startswith("deit_tiny "))
    params = sum(p.numel() for p in vspec.build(vspec.load_spec("deit_tiny")).parameters())
    assert row[1] == "vit" and row[2] == f"{params / 1e6:.2f}" and row[-1] == "fb_in1k"
    assert row[4:6] == ["1.258", "G"]  # 1,257,712,128 MACs (DeiT-Ti's 1.3 G, fvcore's count)
    assert next(line for line in out if line.startswith("deit_tiny_sot ")).split()[1] == "sot"
    # a small spec's MACs in SI units, not 0.00 G; one preset, not "1 presets"
    assert main(["list", "compare_vit", "--examples"]) == 0
    out = capsys.readouterr().out.splitlines()
    # 17 tokens x 64: patches 16 * 64 * 64; per block qkv 17*64*192, proj 17*64*64, q.k and attn.v 2 * 17*17*64,
    # MLP 2 * 17*64*128, two LayerNorms 2 * 5*17*64 (x 3 blocks); the last norm 5*17*64, the head 64*10
    macs = 16 * 64 * 64 + 3 * (17 * 64 * 192 + 17 * 64 * 64 + 2 * 17 * 17 * 64 + 2 * 17 * 64 * 128 + 2 * 5 * 17 * 64) \
        + 5 * 17 * 64 + 64 * 10
    assert out[1].split()[4:6] == [f"{macs / 1e6:.4g}", "M"] and out[2].startswith("1 preset; ")
    assert main(["list", "compare_vit"]) == 0
    assert capsys.readouterr().out == "no preset matches 'compare_vit' but example specs (--examples lists them)\n"
    assert main(["list", "*sot*", "--pretrained"]) == 0
    assert "no preset matches '*sot*' with published weights" in capsys.readouterr().out
    assert main(["list", "t2t_vit_7*", "--pretrained", "--names"]) == 0
    assert capsys.readouterr().out.split() == ["t2t_vit_7.ema"]


def test_name_dot_tag_names_a_preset_and_its_weights(caches, capsys):
    timm = pytest.importorskip("timm")
    ref = perturbed(timm.create_model("deit_tiny_patch16_224"))
    hub_put(caches["hf"], "timm/deit_tiny_patch16_224.fb_in1k", "model.safetensors",
            safetensors_bytes(ref.state_dict()))
    x = torch.randn(1, 3, 224, 224)
    model = vspec.create_model("deit_tiny.fb_in1k", pretrained=True).eval()
    assert torch.allclose(model(x), ref(x), atol=1e-5)
    assert model.pretrained_cfg["tag"] == "fb_in1k"
    with pytest.raises(WeightsUnavailable, match="names the tag 'fb_in1k', pretrained asks for 'other'"):
        vspec.create_model("deit_tiny.fb_in1k", pretrained="other")
    with pytest.raises(WeightsUnavailable, match="no weights tagged 'nope'"):
        vspec.create_model("deit_tiny.nope", pretrained=True)
    assert vspec.create_model("deit_tiny.fb_in1k").spec == vspec.load_spec(presets()["deit_tiny"])
    with pytest.raises(vspec.SpecError, match="'deit_tiny' has no weights tagged 'typo'; its tags: fb_in1k"):
        vspec.create_model("deit_tiny.typo")  # timm refuses an unknown tag, pretrained or not
    assert main(["weights", "vit_base.deit_fb_in1k"]) == 0
    out = capsys.readouterr().out.splitlines()
    shown = [line.split() for line in out if line.startswith("vit_base")]
    assert [row[1] for row in shown] == ["deit_fb_in1k"]  # that entry alone, and no default mark on it
    assert out[-2].startswith("1 published checkpoint of 1 preset; ")
    assert main(["build", "deit_tiny.fb_in1k", "--pretrained"]) == 0
    assert "timm/deit_tiny_patch16_224.fb_in1k" in capsys.readouterr().out


def test_vspec_weights_lines_fit_120_characters(capsys):
    """Every entry's source and score wrap in their column (before: lines up to 291 characters); each entry's
    first line still names its preset, tag and cache state."""
    assert main(["weights"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert max(map(len, out)) <= 120
    first = {tuple(line.split()[:2]) for line in out if line[:1].strip()}
    assert {(name, tag) for name, tag, _ in rows()} <= {(n, t) for n, t in first}
    assert ("deit_tiny_irpe_k", "released") in first
    long = next(e for n, t, e in rows() if (n, t) == ("deit_tiny_irpe_k", "released")).source.url
    assert long in "".join(line[out[0].index("source"):].split("  ")[0] for line in out)


def test_load_spec_takes_a_preset_name():
    assert vspec.load_spec("deit_tiny") == vspec.load_spec(presets()["deit_tiny"])
    assert vspec.load_spec("deit_tiny.fb_in1k") == vspec.load_spec("deit_tiny")
    with pytest.raises(vspec.SpecError, match="unknown preset 'deit_tyni' .close: deit_tiny"):
        vspec.load_spec("deit_tyni")


TAGGED = [["build", "NAME"], ["show", "NAME"], ["profile", "NAME"], ["export", "NAME", "--out", "OUT/m.onnx"],
          ["fit", "NAME", "--target", "params=1M"], ["analyze", "NAME", "--out-dir", "OUT"],
          ["label", "NAME", "--data", "synthetic", "--out", "OUT"],
          ["train", "NAME", "--data", "synthetic", "--out", "OUT"],
          ["compare", "x.json", "--match", "params", "--to", "NAME", "--out-dir", "OUT"]]


@pytest.mark.parametrize("argv", TAGGED, ids=lambda argv: argv[0])
def test_every_command_refuses_a_tag_the_preset_has_not(argv, tmp_path, capsys):
    """One rule wherever a preset is named (`preset_file`), as create_model and timm: a tag of its weights or
    nothing built (`vspec build deit_tiny.nope` built random weights)."""
    spec = tmp_path / "x.json"
    spec.write_text(vspec.to_json(vspec.load_spec("deit_tiny")))
    argv = [a.replace("NAME", "deit_tiny.nope").replace("OUT", str(tmp_path / "out")).replace("x.json", str(spec))
            for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].endswith("error: 'deit_tiny' has no weights tagged 'nope'; its tags: fb_in1k"), err
    assert not (tmp_path / "out").exists()
    with pytest.raises(vspec.SpecError, match="'sot_tiny' has no weights tagged 'x'; its tags: none"):
        vspec.load_spec("sot_tiny.x")


def test_a_known_tag_without_pretrained_trains_the_architecture_on_its_inputs(tmp_path):
    """timm's `create_model("name.tag")` builds the architecture and records the tag's pretrained_cfg, which its
    train.py reads the inputs from: `vspec train name.tag` without --pretrained starts from random weights on the
    tag's mean, std and interpolation (ViT-B's augreg2 weights: mean = std = 0.5, not ImageNet's)."""
    from vspec.cli.train import config_from_args, train_parser

    def inputs(*argv):
        return config_from_args(train_parser().parse_args([*argv, "--data", "synthetic", "--out", str(tmp_path)]))

    tagged = inputs("vit_base.augreg2_in21k_ft_in1k")
    assert tagged.run.pretrained is None and tagged.spec == vspec.load_spec("vit_base")
    assert tagged.data.inputs["mean"] == tagged.data.inputs["std"] == [0.5] * 3
    assert tagged.data.inputs["from"] == "vit_base (augreg2_in21k_ft_in1k)'s preprocessing"
    assert inputs("vit_base").data.inputs["from"] == "vspec's defaults"
    assert inputs("vit_base.deit_fb_in1k", "--mean", "0.4").data.inputs["mean"] == [0.4] * 3  # the flags still win


# (text, what load_spec and the commands take it for, what create_model does, what the weights code does): one
# rule (`resolve_name`), three policies: a saved model first (create_model), what is no path a preset's name
# (create_model's "unknown preset"), a name a preset's even where a file of that name is here (published weights)
NAMES = [
    ("deit_tiny", ("preset", "deit_tiny", None), ("preset", "deit_tiny", None), ("preset", "deit_tiny", None)),
    ("deit_tiny.fb_in1k", ("preset", "deit_tiny", "fb_in1k"), ("preset", "deit_tiny", "fb_in1k"),
     ("preset", "deit_tiny", "fb_in1k")),
    ("deit-tiny.x", ("preset", "deit-tiny", "x"), ("preset", "deit-tiny", "x"), ("preset", "deit-tiny", "x")),
    ("model.onnx", ("file", "model.onnx"), ("preset", "model.onnx", None), ("file", "model.onnx")),
    ("1x.y", ("file", "1x.y"), ("preset", "1x.y", None), ("file", "1x.y")),
    ("spec.PY", ("file", "spec.PY"), ("preset", "spec.PY", None), ("file", "spec.PY")),
    ("sub/deit_tiny", ("file", "sub/deit_tiny"), ("file", "sub/deit_tiny"), ("file", "sub/deit_tiny")),
    ("m.json", ("file", "m.json"), ("file", "m.json"), ("file", "m.json")),
    ("m.pt", ("file", "m.pt"), ("saved", "m.pt"), ("file", "m.pt")),
    ("here", ("file", "here"), ("saved", "here"), ("preset", "here", None)),  # a folder of that name
    ("here.txt", ("file", "here.txt"), ("file", "here.txt"), ("preset", "here", "txt")),  # a file of that name
]


@pytest.mark.parametrize(("text", "spec", "model", "weights"), NAMES, ids=[n[0] for n in NAMES])
def test_one_rule_names_a_model_wherever_it_is_named(text, spec, model, weights, tmp_path, monkeypatch):
    from vspec.spec.catalogue import Named, is_checkpoint, resolve_name

    monkeypatch.chdir(tmp_path)
    (tmp_path / "here").mkdir()
    (tmp_path / "here.txt").write_text("")

    def named(kind, what, tag=None):
        return Named(kind, name=what, tag=tag) if kind == "preset" else Named(kind, path=Path(what))

    assert resolve_name(text) == named(*spec)
    assert resolve_name(text, saved=True, unknown="preset") == named(*model)
    assert resolve_name(text, here=False) == named(*weights)
    assert resolve_name(Path(text)) == named("file", text)  # a Path is a path
    assert is_checkpoint(text) == (model[0] == "saved")
