"""A whole new family added from outside vspec (issue 33): tests/toy_family (a block kind, an FFN kind, their modules, a
converter of a "released" model, a preset, a carried state of its own: issue 45) registered with
`vspec.register_family`, or found through the `vspec.families` entry point of an installed distribution, without any
edit under vspec/. It builds and trains, profiles to the last parameter and MAC, converts a released state dict to
the same function as the released model written here, round-trips through JSON, TOML and model folders, and works
from the command line, where its paper's recipe trains (`vspec train --recipe`) and its figure draws (`vspec analyze`):
issue 56, a paper is one folder."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import vspec
import vspec.cli
from tests.helpers.checks import assert_every_parameter_learns
from tests.helpers.contracts import assert_contracts
from vspec.analysis import analyses
from vspec.spec import KINDS, SpecError, families
from vspec.train.recipes import RECIPES, resolve

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


@pytest.fixture(scope="module")
def family():
    spec_module = vspec.register_family("tests.toy_family")  # tests/ is a package of the checkout
    yield spec_module
    families.unregister_family("tests.toy_family")
    assert "gated" not in KINDS and not hasattr(vspec.spec, "GatedBlock")
    assert "toy_rezero" not in RECIPES and "gates" not in analyses()


def preset():
    return vspec.create_model("toy_tiny").spec


def test_the_family_is_known_by_name_kind_and_preset(family):
    assert vspec.spec.GatedBlock is family.GatedBlock and KINDS["glu_ffn"] is family.GLUFFN
    assert "tests.toy_family" in families.packages()
    spec = preset()
    assert type(spec.block).kind == "gated" and spec.block.ffn.kind == "glu_ffn" and spec.block.gate_init == 0.1
    assert vspec.from_json(vspec.to_json(spec)) == spec and vspec.from_toml(vspec.to_toml(spec)) == spec
    assert vspec.override(spec, {"block.ffn.hidden": 24}).block.ffn.hidden == 24
    with pytest.raises(SpecError, match="^block.layer_scale: a gated block scales its branches"):
        vspec.override(spec, {"block.layer_scale": 0.1})
    # a block of the core switches to the family's kind and back (`--set block=gated`)
    deit = vspec.override(vspec.load_spec(ROOT / "specs" / "deit_tiny.py"), {"block": "gated"})
    assert type(deit.block).kind == "gated" and deit.block.attention.heads == 3


def test_it_builds_trains_and_profiles(family):
    spec = preset()
    torch.manual_seed(0)
    model = vspec.build(spec).double()
    out = model(vspec.example_input(spec, 2, dtype=torch.float64))
    (out * torch.randn_like(out)).sum().backward()
    assert_every_parameter_learns(model)
    prof = vspec.profile(spec)
    assert prof.params == sum(p.numel() for p in model.parameters())
    assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs
    d, n, hidden = 32, 16 + 1, 8 * 32 // 3 // 8 * 8
    assert prof.components["stages.0.blocks.0"].macs >= n * 3 * d * hidden  # the GLU's three maps are counted


def released(sd: dict, config: dict, x: torch.Tensor) -> torch.Tensor:
    """The "released" gated transformer, written here from its description (pre-norm, ReZero gates, GLU FFN)."""
    d, h = config["dim"], config["heads"]
    t = F.conv2d(x, sd["patch.weight"], sd["patch.bias"], stride=config["patch"]).flatten(2).transpose(1, 2)
    t = torch.cat((sd["cls_token"].expand(len(x), -1, -1), t), 1) + sd["pos_embed"]
    for i in range(config["depth"]):
        p = f"layers.{i}."
        y = F.layer_norm(t, (d,), sd[p + "n1.weight"], sd[p + "n1.bias"], 1e-6)
        q, k, v = (y @ sd[p + "qkv.weight"].T + sd[p + "qkv.bias"]).reshape(len(x), -1, 3, h, d // h).unbind(2)
        a = torch.softmax(torch.einsum("bnhd,bmhd->bhnm", q, k) / math.sqrt(d // h), -1)
        y = torch.einsum("bhnm,bmhd->bnhd", a, v).reshape(len(x), -1, d) @ sd[p + "proj.weight"].T + sd[p + "proj.bias"]
        t = t + sd[p + "gates"][0] * y
        y = F.layer_norm(t, (d,), sd[p + "n2.weight"], sd[p + "n2.bias"], 1e-6)
        y = (y @ sd[p + "w.weight"].T + sd[p + "w.bias"]) * F.silu(y @ sd[p + "v.weight"].T + sd[p + "v.bias"])
        t = t + sd[p + "gates"][1] * (y @ sd[p + "out.weight"].T + sd[p + "out.bias"])
    t = F.layer_norm(t, (d,), sd["norm.weight"], sd["norm.bias"], 1e-6)
    return t[:, 0] @ sd["fc.weight"].T + sd["fc.bias"]


def test_its_converter_loads_a_released_state_dict(family):
    config = {"dim": 32, "depth": 2, "heads": 2, "num_classes": 10, "img_size": 16, "patch": 4}
    from tests.toy_family.convert import TOY

    family_spec = TOY.spec_of(config)
    torch.manual_seed(1)
    model = vspec.build(family_spec)
    rename = {"embedder.proj": "patch", "head.fc": "fc"}
    sd = {}
    for key, value in model.state_dict().items():
        new = key
        for a, b in rename.items():
            new = new.replace(a, b)
        new = new.replace("stages.0.blocks.", "layers.").replace(".attn.", ".").replace(".ffn.", ".")
        new = new.replace(".norm1.", ".n1.").replace(".norm2.", ".n2.")
        sd[new] = value + 0.1 * torch.rand_like(value) if value.is_floating_point() else value
    converted = vspec.convert.from_official("toy", sd, config).double()
    assert converted.spec == family_spec and not converted.training  # eval, as every loader's
    x = torch.randn(2, 3, 16, 16, dtype=torch.float64)
    with torch.no_grad():
        ref = released({k: v.double() for k, v in sd.items()}, config, x)
        assert (converted(x) - ref).abs().max() < 1e-10
    with pytest.raises(vspec.convert.ConversionError, match="unused checkpoint keys: extra"):
        vspec.convert.from_official("toy", {**sd, "extra": torch.zeros(1)}, config)
    with pytest.raises(vspec.convert.ConversionError, match="unknown argument 'colour'"):
        vspec.convert.from_official("toy", sd, {**config, "colour": 1})


def test_reading_the_tables_imports_no_converter():
    """A family names its converters by dotted path: building the module table (every family's family.py, the toy's
    too) imports no `convert` module; `official()` imports them, each the record its path names."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = ("import json, sys, vspec, vspec.compiler; vspec.register_family('tests.toy_family'); "
            "vspec.compiler.modules(); before = sorted(m for m in sys.modules if 'convert' in m.rpartition('.')[2] "
            "and m.startswith(('vspec', 'tests.toy'))); "
            "import vspec.convert; from tests.toy_family.convert import TOY; "
            "print(json.dumps([before, vspec.convert.official()['toy'] is TOY]))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [[], True]


def test_a_converter_not_named_by_path_is_refused_in_one_line(monkeypatch):
    tables = families.tables
    monkeypatch.setattr(families, "tables", lambda name: {**tables(name), "odd": len} if name == "CONVERTERS"
                        else tables(name))
    with pytest.raises(vspec.convert.ConversionError, match=r"^converter 'odd': a family names it by dotted path "
                                                            r"\('package.module:NAME'\), got a builtin_function"):
        vspec.convert.from_official("odd", {}, {})


def traced(head=None, **fields):
    """Gated, traced, gated, traced, gated blocks, the trace head: the second traced block's trace reaches the head."""
    t = vspec.spec
    kinds = [t.GatedBlock, t.TracedBlock, t.GatedBlock, t.TracedBlock, t.GatedBlock]
    body = {"depth": 5, "block": [k(attention=t.MHSA(heads=2), ffn=t.GLUFFN(), gate_init=0.5) for k in kinds]}
    return t.Model(embedder=t.PatchEmbed(patch_size=4), img_size=16, dim=32, num_classes=10,
                   head=head or t.TraceHead(), **{**body, **fields})


def test_a_carried_state_of_its_own(family):
    """A third kind of carried state, declared by the family's kinds alone: the layout shapes it from where it is
    written to the head that reads it (the first trace, overwritten before any reader, is dropped), the model
    threads it (against a forward written from the blocks' outputs), it learns, profiles, and prints."""
    spec = traced()
    assert [{k: v.shape for k, v in s.items()} for s in vspec.spec.state_layout(spec)] == \
        [{}, {}, {}, {}, {"trace": (32,)}, {"trace": (32,)}]
    torch.manual_seed(0)
    model = vspec.build(spec).double()
    assert_contracts(model)  # the family's block and head keep the core's contracts (vspec/nn/contracts.py)
    assert [sorted(b.hands_on) for b in model.stages[0].blocks] == [[], [], [], ["trace"], []]
    x = vspec.example_input(spec, 2, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        out = model(x)
        taps = model.forward_intermediates(x, output_fmt="NLC", intermediates_only=True)
        assert torch.allclose(out, model.head.fc(model.norm(taps[-1])[:, 0] + taps[3][:, 0]), atol=1e-12)
        assert not torch.allclose(out, model.head.fc(model.norm(taps[-1])[:, 0] + taps[1][:, 0]), atol=1e-6)
        features = model.forward_features(x)
        assert isinstance(features, tuple) and torch.equal(features[1], taps[3][:, 0])
        assert torch.equal(model.forward_head(features), out)
        assert "trace" not in model.stages[0].blocks[1](taps[0]).state  # no later part reads this one
    model.train()
    (model(x) * torch.randn(2, 10, dtype=torch.float64)).sum().backward()
    assert_every_parameter_learns(model)
    prof = vspec.profile(spec)
    assert prof.params == sum(p.numel() for p in model.parameters())
    assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs
    assert prof.components["head"].macs == 32 * 10
    labels = vspec.cli.tables.stage_labels(spec, [s.tokens for s in vspec.spec.layout(spec)])
    assert labels == ["stage 0: 4x4 + 1 tokens x 32 -> trace x 32"]


def test_a_state_nothing_writes_is_refused(family):
    with pytest.raises(SpecError, match="^head: the trace_head head reads the state 'trace', which no part before it"):
        traced(block=vspec.spec.GatedBlock(attention=vspec.spec.MHSA(heads=2)), depth=2)
    with pytest.raises(SpecError, match="^block.1: a traced block writes its class token"):
        traced(class_token=False)


def test_folders_and_the_command_line(family, tmp_path, capsys):
    spec = preset()
    torch.manual_seed(0)
    model = vspec.build(spec).eval()
    folder = vspec.save_pretrained(model, tmp_path / "folder")
    x = vspec.example_input(spec, 2)
    with torch.no_grad():
        assert torch.equal(vspec.from_pretrained(folder).eval()(x), model(x))
    path = tmp_path / "toy.json"
    path.write_text(vspec.to_json(spec))
    for argv in (["build", str(path), "--out", str(tmp_path / "toy.pt")], ["profile", str(path)], ["show", str(path)],
                 ["export", str(tmp_path / "toy.pt"), "--out", str(tmp_path / "toy.pt2")]):
        assert vspec.cli.main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "GatedBlock (gated)" in out and "GLUFFN (glu_ffn)" in out
    assert vspec.cli.main(["train", str(path), "--data", "digits", "--out", str(tmp_path / "run"), "--epochs", "1",
                           "--max-steps", "2", "--batch-size", "16"]) == 0
    assert vspec.load(tmp_path / "run" / "last.pt").spec == spec


def test_its_recipe_and_its_analysis_are_found_without_a_core_edit(family, tmp_path, capsys):
    """The toy's `paper.py` declares a recipe and a figure (tests/toy_family/analysis.py): the recipe is one of
    `RECIPES` (vspec's own keep their order) and trains a run through `vspec train --recipe`; the figure is one of
    `vspec analyze`'s, in its --help, drawn by `--what gates` and by the default (all), refused in one line for a
    model without gated blocks. Reading the tables imports neither torch nor the figure."""
    assert RECIPES["toy_rezero"].lr == 3e-3 and resolve("toy_rezero", batch_size=32).lr == 6e-3
    assert list(RECIPES)[:6] == ["deit", "dhvt_cifar", "msf", "refiner", "refiner_advanced", "toy_rezero"]
    path = tmp_path / "toy.json"
    path.write_text(vspec.to_json(preset()))
    assert vspec.cli.main(["train", str(path), "--data", "digits", "--recipe", "toy_rezero", "--out",
                           str(tmp_path / "run"), "--max-steps", "2"]) == 0
    saved = torch.load(tmp_path / "run" / "last.pt", map_location="cpu", weights_only=False)["recipe"]
    assert (saved["epochs"], saved["batch_size"], saved["lr"]) == (2, 16, 3e-3)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        vspec.cli.main(["analyze", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "gates -> PATH_STEM.gates.png/.json: the two ReZero gates" in text and "among msf, cka, maps, gates" in text
    assert vspec.cli.main(["analyze", str(path), "--what", "gates", "--out-dir", str(tmp_path / "one")]) == 0
    drawn = json.loads((tmp_path / "one" / "toy.gates.json").read_text())["gates"]
    assert drawn == [[pytest.approx(0.1)] * 2] * preset().depth
    assert (tmp_path / "one" / "toy.gates.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert vspec.cli.main(["analyze", str(path), "--out-dir", str(tmp_path / "all"), "--batch-size", "2"]) == 0
    assert {p.name for p in (tmp_path / "all").iterdir()} >= {"toy.gates.json", "toy.maps.json"}
    deit = tmp_path / "deit.json"
    deit.write_text(vspec.to_json(vspec.override(vspec.load_spec(ROOT / "specs" / "deit_tiny.py"),
                                                 {"depth": 1, "dim": 24, "img_size": 16})))
    capsys.readouterr()
    assert vspec.cli.main(["analyze", str(deit), "--what", "gates", "--out-dir", str(tmp_path / "deit")]) == 2
    assert capsys.readouterr().err == "vspec analyze: error: gates: the model has no gated block\n"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = ("import sys, vspec.cli; vspec.register_family('tests.toy_family'); vspec.cli.parser(); "
            "from vspec.train.recipes import RECIPES; from vspec.analysis import analyses; "
            "print('toy_rezero' in RECIPES, 'gates' in analyses(), 'torch' in sys.modules, "
            "'tests.toy_family.analysis' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "False", "False"]


def test_an_installed_distributions_entry_point_is_found(tmp_path):
    """A distribution that declares `[vspec.families] toy = tests.toy_family`: a fresh process finds the family with no
    call at all, and `vspec build` builds its preset by name."""
    dist = tmp_path / "site" / "toy_family_dist-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-family-dist\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[vspec.families]\ntoy = tests.toy_family\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT)]))
    code = ("import json, vspec; spec = vspec.create_model('toy_tiny').spec; "
            "print(json.dumps([type(spec.block).kind, 'toy' in vspec.convert.official()]))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == ["gated", True]
    done = subprocess.run([sys.executable, "-m", "vspec.cli", "build", str(TESTS / "toy_family/presets/toy_tiny.py")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "gated" not in done.stderr, done.stderr[-2000:]


def test_a_broken_installed_family_is_skipped_with_a_warning(tmp_path):
    dist = tmp_path / "site" / "broken-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[vspec.families]\nbroken = no_such_family_package\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT)]))
    done = subprocess.run([sys.executable, "-W", "always", "-c", "import vspec; print(len(vspec.spec.KINDS))"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and int(done.stdout) > 30, done.stderr[-2000:]
    assert "vspec family 'no_such_family_package'" in done.stderr and "could not be loaded" in done.stderr
