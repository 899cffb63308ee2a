"""A base install (issue 44, item 3): with an extra's modules missing, every `vspec <command> --help` exits 0 and
a command that needs the extra says which in one line, through the installed console script."""

import os
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli dependency
    import tomli as tomllib

from vspec.cli import COMMANDS, RUNS
from vspec.extras import EXTRAS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "vspec"
BLOCKER = ("import os, sys\n"
           "for _name in filter(None, os.environ.get('VSPEC_TEST_BLOCK', '').split(',')):\n"
           "    sys.modules[_name] = None  # import fails as if not installed; importlib.util.find_spec gives None\n")


def extras() -> dict[str, list[str]]:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {name: reqs for name, reqs in table.items() if name != "dev"}


def test_the_table_of_extras_is_pyproject_s():
    dists = packages_distributions()
    declared = {extra: {r.split(">")[0].split("=")[0].split("<")[0].strip().lower() for r in reqs}
                for extra, reqs in extras().items()}
    for module, extra in EXTRAS.items():
        assert {d.lower() for d in dists[module]} & declared[extra], (module, extra)
    covered = {d.lower() for m in EXTRAS for d in dists[m]}
    assert all(req in covered for reqs in declared.values() for req in reqs), declared


def run(tmp_path, blocked: list[str], *argv: str) -> subprocess.CompletedProcess:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    # this checkout's package (not the one the script was installed from)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "VSPEC_TEST_BLOCK": ",".join(blocked)}
    return subprocess.run([str(SCRIPT), *argv], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


@pytest.mark.parametrize("extra", ["train", "text", "export", "shards", "hf"])
def test_every_help_works_without_an_extra(tmp_path, extra):
    assert SCRIPT.is_file(), SCRIPT
    blocked = [m for m, e in EXTRAS.items() if e == extra]
    for command in [*COMMANDS, *RUNS]:
        done = run(tmp_path, blocked, command, "--help")
        assert done.returncode == 0 and "usage:" in done.stdout, (extra, command, done.stderr[-1500:])


@pytest.mark.parametrize("extra, argv", [
    ("train", ["train", "demo_digits", "--out", "run", "--epochs", "1"]),
    ("train", ["eval", "none.pt"]),
    ("text", ["train", "bert_base", "--data", "rt-polarity", "--out", "run", "--epochs", "1"]),
    ("export", ["export", "deit_tiny", "--out", "m.onnx"]),
    ("train", ["analyze", "demo_digits", "--what", "maps"]),
    ("shards", ["train", "demo_digits", "--data", "shards", "--data-dir", "packed", "--out", "run", "--epochs", "1"]),
    ("hf", ["train", "demo_digits", "--data", "hf", "--data-dir", "owner/name", "--out", "run", "--epochs", "1"]),
])
def test_a_command_that_needs_an_extra_names_it_in_one_line(tmp_path, extra, argv):
    done = run(tmp_path, [m for m, e in EXTRAS.items() if e == extra], *argv)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert done.stderr.count(f"pip install 'vspec[{extra}]'") == 1 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("extra, code, what", [
    ("train", "import vspec; vspec.create_model('deit_tiny', features_only=True)", "create_model(features_only=True)"),
    ("train", "import vspec.train.engine", "vspec's training and evaluation (vspec.train)"),
    ("train", "from vspec.analysis import pyplot; pyplot()", "vspec's plots"),
    ("text", "from vspec.train.text.tokenizer import train_wordpiece; train_wordpiece(['a b'], 'tok')",
     "training a WordPiece vocabulary"),
    ("text", "import vspec; vspec.register_hf()", "vspec.register_hf"),
])
def test_a_function_that_needs_an_extra_names_it(tmp_path, extra, code, what):
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    blocked = [m for m, e in EXTRAS.items() if e == extra]
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "VSPEC_TEST_BLOCK": ",".join(blocked)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith(f"ModuleNotFoundError: {what} needs "), done.stderr[-1500:]
    assert last.endswith(f"pip install 'vspec[{extra}]'"), last


@pytest.mark.slow
def test_the_wheel_installed_elsewhere_runs_without_extras(tmp_path):
    """The built wheel, installed into a folder of its own (no checkout on the path, cwd elsewhere): its presets,
    version and metadata travel, and every --help and a first build work with no extra importable."""
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(wheels), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("vspec-*.whl")
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                                str(wheel)], capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-2000:]
    meta = next(target.glob("vspec-*.dist-info")) / "METADATA"
    assert "License-Expression: MIT" in meta.read_text()
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    blocked = [m for m in EXTRAS]
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{target}", "VSPEC_TEST_BLOCK": ",".join(blocked)}
    work = tmp_path / "elsewhere"
    work.mkdir()

    def vspec(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", "import sys; from vspec.cli import main; sys.exit(main())",
                               *argv], capture_output=True, text=True, env=env, cwd=work, timeout=300)

    where = vspec("--version")
    assert where.returncode == 0 and where.stdout.startswith("vspec "), where.stderr[-1500:]
    for command in [*COMMANDS, *RUNS]:
        done = vspec(command, "--help")
        assert done.returncode == 0 and "usage:" in done.stdout, (command, done.stderr[-1500:])
    listed = vspec("list", "*sot*", "--names")
    assert listed.returncode == 0 and "sot_tiny" in listed.stdout.split(), listed.stderr[-1500:]
    built = vspec("build", "sot_tiny")
    assert built.returncode == 0 and "finite=True" in built.stdout, built.stderr[-1500:]
    assert str(target) in subprocess.run([sys.executable, "-c", "import vspec; print(vspec.__file__)"],
                                         capture_output=True, text=True, env=env, cwd=work).stdout
