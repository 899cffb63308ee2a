"""The package a newcomer installs (issue 44, items 5, 6 and 9): one version everywhere (the package, `vspec
--version`, checkpoints, model folders), a licence in the metadata, no binaries committed, the linter in CI."""

import json
import re
import subprocess
import sys
from importlib.metadata import metadata
from pathlib import Path

import vspec
from vspec.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_one_version_in_the_package_the_command_and_what_it_writes(capsys, tmp_path):
    assert vspec.__version__ == metadata("vspec")["Version"]
    try:
        main(["--version"])
    except SystemExit as e:
        assert e.code == 0
    assert capsys.readouterr().out.strip() == f"vspec {vspec.__version__}"
    model = vspec.build(vspec.override(vspec.load_spec(ROOT / "specs/deit_tiny.py"), {"depth": 1}))
    vspec.save(model, tmp_path / "m.pt")
    import torch

    assert torch.load(tmp_path / "m.pt", weights_only=False)["vspec_version"] == vspec.__version__
    vspec.save_pretrained(model, tmp_path / "folder")
    config = json.loads((tmp_path / "folder" / "config.json").read_text())
    assert config["vspec_version"] == vspec.__version__
    assert config["spec"]["version"] == vspec.VERSION  # the spec format's version, in every file a spec is in


def test_the_metadata_names_a_licence_that_ships():
    meta = metadata("vspec")
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert meta["License-Expression"] == "MIT" and "LICENSE" in meta.get_all("License-File")
    assert meta["Author"] or meta["Author-email"]
    # the long description stands off the repository: no relative link an index's page could not follow
    description = meta.get_payload() or meta["Description"]
    assert "Transformer architectures for vision and language" in description
    assert not [link for link in re.findall(r"\]\(([^)]+)\)", description) if not link.startswith("https://")]


def test_no_binary_is_committed_and_ci_lints():
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    assert files, "not a git checkout"
    assert not [f for f in files if f.endswith((".whl", ".tar.gz", ".so", ".zip"))]
    assert "make lint" in (ROOT / ".ci" / "run").read_text().splitlines()
    # the project cites its own pages, never a file its users do not have
    cited = "PAPERS" + ".md"  # spelled apart: this file is among those read
    assert not [f for f in files if f.endswith((".py", ".md")) and cited in (ROOT / f).read_text()]
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "vspec", "tests", "tools", "benchmarks", "specs"],
                          capture_output=True, text=True, cwd=ROOT)
    assert lint.returncode == 0, lint.stdout[-2000:]


def test_git_ignores_what_the_documented_commands_write():
    """Every `--out` / `--out-dir` of a command line in the README and docs/ (`$ ...`), `vspec data pack`'s folder,
    `python -m build`'s dist/ and analyze's default folder: a clone stays clean after following the docs (issue 54)."""
    pages = [ROOT / "README.md", ROOT / "DESCRIPTION.md", *sorted((ROOT / "docs").rglob("*.md"))]
    lines = [line for page in pages for line in page.read_text().splitlines() if line.lstrip().startswith("$ ")]
    outs = {m[1] for line in lines for m in re.finditer(r"--out(?:-dir)?[ =]([a-z0-9_./-]+)(?=\s|$)", line)}
    outs |= {m[1] for line in lines for m in re.finditer(r"vspec data pack (?:--\S+ )*\S+ ([a-z0-9_./-]+)", line)}
    assert {"cmp", "relabel/digits", "packed/", "deit_tiny.onnx", "runs/first"} <= outs  # the pages still say so
    written = [o if Path(o).suffix else f"{o.rstrip('/')}/last.pt.tmp" for o in outs]
    written += ["dist/vspec-0.1.0.tar.gz", "runs/analyze/deit_tiny.maps.png"]
    check = subprocess.run(["git", "check-ignore", "--no-index", "--verbose", "--non-matching", *written],
                           capture_output=True, text=True, cwd=ROOT)
    assert [line.split("\t")[1] for line in check.stdout.splitlines() if line.startswith("::")] == []


def test_the_readme_starts_with_the_main_job_then_the_tests():
    """A newcomer's first two commands (issue 44, item 7): one that installs what it needs and runs the main job
    on a preset, one that runs the tests; `make install` makes the environment and runs nothing else."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Set up", 1)[1].split("```console\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.startswith("$ ")]
    assert commands[:2] == ["$ make install && .venv/bin/vspec build sot_tiny", "$ make test"], commands
    dry = subprocess.run(["make", "-n", "-B", "install"], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "pip install" in dry and "pytest" not in dry
    assert "### With pip" in readme and "pip install '.[train]'" in readme
