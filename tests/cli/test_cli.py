"""The `vspec` command: outputs, checkpoints, and one-line errors with exit code 2."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vspec
from vspec.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "specs/deit_tiny.py")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_build_reports_parameter_count(capsys):
    code, out, err = run(capsys, "build", TINY)
    assert code == 0, err
    assert "5,717,416 parameters" in out
    assert re.search(r"^  stages\.0\.blocks\.0-11 +12 x 444,864$", out, re.M)
    assert re.search(r"^stage 0: 14x14 \+ 1 tokens x 192 +5,338,368$", out, re.M)
    assert "-> (1, 1000)" in out


def test_build_json_is_the_spec(capsys):
    code, out, _ = run(capsys, "build", TINY, "--json", "--set", "head.kind=gap", "--set", "num_classes=7")
    assert code == 0
    spec = vspec.from_json(out)
    assert spec == vspec.override(vspec.load_spec(TINY), {"head.kind": "gap", "num_classes": 7})


def test_build_out_writes_a_checkpoint_that_reloads(capsys, tmp_path):
    ckpt = tmp_path / "tiny.pt"
    code, _, err = run(capsys, "build", TINY, "--set", "depth=2", "--set", "num_classes=5", "--out", str(ckpt))
    assert code == 0, err
    raw = torch.load(ckpt, weights_only=True)
    model = vspec.load(ckpt).eval()
    assert model.spec.depth == 2 and model.num_classes == 5
    reference = vspec.build(vspec.from_json(raw["spec"])).eval()
    reference.load_state_dict(raw["state_dict"])
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        assert torch.equal(model(x), reference(x))


def test_profile_json_keys_and_values(capsys):
    code, out, _ = run(capsys, "profile", TINY, "--json")
    assert code == 0
    data = json.loads(out)
    for key in ("params", "params_trainable", "params_weights", "macs", "components", "unsupported_ops", "counter"):
        assert key in data
    assert data["params"] == 5_717_416
    assert abs(data["macs"] - 1.2537e9) / 1.2537e9 < 0.005
    assert data["unsupported_ops"] == []
    block = data["components"]["stages.0.blocks.3"]
    assert block == {"params": 444_864, "macs": block["macs"], "role": "block", "stage": 0, "index": 3}
    assert block["macs"] > 0
    assert [s["grid"] for s in data["stages"]] == [[14, 14]] and data["distinct_parts"] == 4


def test_profile_table_and_input_size(capsys):
    code, out, _ = run(capsys, "profile", str(ROOT / "specs/simplevit_s.py"), "--input-size", "112")
    assert code == 0
    assert "at 112x112" in out and "total" in out and "counter: fvcore" in out


def test_profile_meta_flag(capsys):
    code, out, _ = run(capsys, "profile", TINY, "--meta", "--json")
    assert code == 0 and json.loads(out)["counter"].endswith("(meta device)")


def test_show_prints_the_tree(capsys):
    code, out, _ = run(capsys, "show", TINY, "--set", "block.attention.heads=6")
    assert code == 0
    assert "attention: MHSA (mhsa)" in out and "heads: 6" in out


def test_toml_and_json_files(capsys, tmp_path):
    spec = vspec.override(vspec.load_spec(TINY), {"depth": 1})
    (tmp_path / "s.toml").write_text(vspec.to_toml(spec))
    (tmp_path / "s.json").write_text(vspec.to_json(spec))
    for name in ("s.toml", "s.json"):
        code, out, err = run(capsys, "build", str(tmp_path / name))
        assert code == 0, err
        assert f"{5_717_416 - 11 * 444_864:,} parameters" in out


@pytest.mark.parametrize("argv,needle", [
    (["build", TINY, "--set", "block.attention.heads=5"], "block.attention.heads: 5 does not divide dim 192"),
    (["build", TINY, "--set", "block.attention.heads=x"], "block.attention.heads: must be int, got str 'x'"),
    (["build", TINY, "--set", "block.atention.heads=3"], "block.atention: unknown key"),
    (["build", TINY, "--set", "head.kind=cls"], "head.kind: unknown kind 'cls'; allowed: class_token, gap"),
    (["build", TINY, "--set", "heads"], "must look like key=value"),
    (["build", "nope.py"], "nope.py: no such file"),
    (["build", str(ROOT / "README.md")], "unsupported spec file type '.md'"),
    (["profile", TINY, "--input-size", "100"], "embedder.patch_size: 16 does not divide the image height 100"),
    (["profile"], "the following arguments are required: PATH"),
    (["profile", TINY, "--input-size", "big"], "invalid int value"),
    (["frobnicate"], "invalid choice"),
])
def test_errors_are_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_bad_spec_file_contents(capsys, tmp_path):
    (tmp_path / "nospec.py").write_text("X = 1\n")
    (tmp_path / "typo.py").write_text("from vspec.spec import Model\n\nSPEC = Modle()\n")
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "extra.toml").write_text('dim = 192\ncolour = "red"\n')
    for name, needle in (("nospec.py", "must define SPEC = Model(...)"),
                         ("typo.py", "typo.py, line 3: NameError: name 'Modle' is not defined"),
                         ("broken.json", "invalid JSON"),
                         ("extra.toml", "colour: unknown key for Model")):
        code, _, err = run(capsys, "build", str(tmp_path / name))
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_console_script_entry_point():
    """The installed `vspec` command: --help everywhere, and errors on stderr with exit code 2."""
    exe = Path(sys.executable).with_name("vspec")
    for args in (["--help"], ["build", "--help"], ["profile", "--help"], ["show", "--help"], ["analyze", "--help"]):
        done = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "usage: vspec" in done.stdout
    done = subprocess.run([str(exe), "show", TINY, "--set", "dim=0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "vspec: error: dim: must be >= 1, got 0"


def test_python_dash_m_vspec_is_the_command():
    """`python -m vspec` runs the `vspec` command, errors as one line with exit code 2."""
    done = subprocess.run([sys.executable, "-m", "vspec", "show", TINY, "--set", "dim=0"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.strip() == "vspec: error: dim: must be >= 1, got 0"
    done = subprocess.run([sys.executable, "-m", "vspec", "build", "--help"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.startswith("usage: vspec build")


def test_readme_swin_example_runs():
    """The spec page's stages example: the Swin-T it writes out is specs/swin_tiny.py (but drop_path)."""
    text = (ROOT / "docs/spec.md").read_text()
    code = text.split("## Stages: hierarchical bodies (Swin)")[1].split("```python")[1].split("```")[0]
    scope: dict = {}
    exec(compile(code, "docs/spec.md", "exec"), scope)
    assert vspec.override(scope["swin_t"], {"drop_path": 0.2}) == vspec.load_spec(ROOT / "specs/swin_tiny.py")


def test_readme_error_examples_are_what_the_command_prints(capsys, tmp_path, monkeypatch):
    """The spec page's invalid-spec examples: each `$ vspec ...` line prints exactly the line below it."""
    import re
    import shlex

    text = (ROOT / "docs/spec.md").read_text()
    blocks = [b.split("```")[0] for b in text.split("```console")[1:]]
    files = dict(kv for b in blocks for kv in re.findall(r"^\$ cat (\S+)\n(.+)$", b, re.M))
    examples = [e for b in blocks for e in re.findall(r"^\$ vspec (.+)\n(vspec: error: .+)$", b, re.M)]
    assert len(examples) >= 5 and files
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    monkeypatch.chdir(ROOT)
    for command, expected in examples:
        argv = [str(tmp_path / a) if a in files else a for a in shlex.split(command)]
        code, _, err = run(capsys, *argv)
        assert code == 2 and err.strip() == expected


def test_profile_and_build_of_a_hierarchical_body(capsys):
    code, out, _ = run(capsys, "profile", str(ROOT / "specs/swin_tiny.py"), "--json")
    data = json.loads(out)
    assert code == 0 and data["params"] == 28_288_354 and data["unsupported_ops"] == []
    assert [(s["dim"], s["grid"], s["depth"]) for s in data["stages"]] == \
        [(96, [56, 56], 2), (192, [28, 28], 2), (384, [14, 14], 6), (768, [7, 7], 2)]
    assert sum(s["params"] for s in data["stages"]) + sum(
        c["params"] for c in data["components"].values() if c["stage"] is None) == data["params"]
    code, out, _ = run(capsys, "build", str(ROOT / "specs/swin_tiny.py"), "--set", "img_size=112",
                       "--set", "stages.3.entry=null", "--set", "stages.3.dim=384",
                       *[f"--set=stages.{i}.block.attention.window=7" for i in range(4)])
    assert code == 0, out
    assert "4 stages of 2/2/6/2 blocks at widths 96/192/384/384" in out
    assert re.search(r"^stage 3: 7x7 tokens x 384 ", out, re.M) and "stages.2.entry" in out
    assert "stages.3.entry" not in out


def test_readme_layout_table_matches_the_tree():
    """Every module file of vspec/spec, nn and ops is named in the design page's layout table, and every file
    the table names exists."""
    text = (ROOT / "docs/design.md").read_text().split("## Layout")[1]
    for layer in ("spec", "nn", "ops"):
        row = next(line for line in text.splitlines() if line.startswith(f"| `vspec/{layer}/`"))
        named = set(re.findall(r"`(\w+\.py)`", row))
        files = {p.name for p in (ROOT / "vspec" / layer).glob("*.py")} - {"__init__.py"}
        assert named == files, (layer, named ^ files)
    for path in re.findall(r"`((?:vspec|tests)/[\w/]+(?:\.py)?)`", text):
        assert (ROOT / path).exists(), path


def test_the_command_line_imports_no_command_it_does_not_run():
    """`vspec` is one module per command (vspec/cli/): importing it, or parsing `vspec --help`'s table, imports
    neither torch nor the training commands (vspec.cli.train, vspec.cli.eval: tools/train.py's and tools/eval.py's
    own parsers, imported when `vspec train` / `vspec eval` run)."""
    code = ("import sys, vspec.cli; vspec.cli.parser(); "
            "print(*(m in sys.modules for m in ('torch', 'vspec.cli.train', 'vspec.cli.eval', 'vspec.train.engine')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"] * 4
