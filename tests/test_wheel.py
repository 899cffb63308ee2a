"""The package installs with its presets (issue 33, item 6): a wheel built from this checkout by `pip wheel`, installed
into a temporary folder, creates every preset from there, run in a process that cannot see the checkout. The sdist
holds the package and no part of the test tree (issue 54: its tests need the clone's specs/, docs/ and tools/)."""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# in the installed copy: where vspec is, its presets, every one created (on the meta device: the figures, not the
# weights, are what differs between presets) and one built for real and run
CHECK = """
import json, sys
import torch
import vspec
from vspec.factory import presets
names = sorted(presets())
with torch.device("meta"):
    params = {n: sum(p.numel() for p in vspec.create_model(n).parameters()) for n in names}
model = vspec.create_model("deit_tiny", num_classes=3, img_size=32, depth=1).eval()
with torch.no_grad():
    out = model(model.example_input(2))
print(json.dumps({"vspec": vspec.__file__, "presets": names, "params": params, "out": list(out.shape)}))
"""


def _source(tmp_path: Path) -> Path:
    """A copy of the checkout to build from: setuptools keeps its build/ folder in the tree it builds, where files of
    an earlier layout would stay and ship."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", "runs",
        "*.whl"))
    return source


def test_the_sdist_holds_the_package_and_no_tests(tmp_path):
    out = tmp_path / "dist"
    build = f"from setuptools import build_meta; print(build_meta.build_sdist({str(out)!r}))"
    done = subprocess.run([sys.executable, "-c", build], cwd=_source(tmp_path), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    names = [n.partition("/")[2] for n in tarfile.open(out / done.stdout.split()[-1]).getnames()]
    assert [n for n in names if n.split("/")[0] == "tests"] == []
    shipped = sorted(Path(n).stem for n in names if n.startswith("vspec/presets/"))
    assert shipped == sorted(p.stem for p in (ROOT / "specs").glob("*.py"))
    assert {"pyproject.toml", "LICENSE", "DESCRIPTION.md", "vspec/__init__.py", "vspec/cli/__main__.py"} <= set(names)


def test_the_wheel_installs_with_every_preset(tmp_path):
    wheels, target, elsewhere = tmp_path / "wheels", tmp_path / "site", tmp_path / "cwd"
    elsewhere.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    source = _source(tmp_path)
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)], check=True,
                   timeout=300, capture_output=True)
    (wheel,) = wheels.glob("vspec-*.whl")
    shipped = sorted(Path(n).stem for n in zipfile.ZipFile(wheel).namelist() if n.startswith("vspec/presets/"))
    assert shipped == sorted(p.stem for p in (ROOT / "specs").glob("*.py"))
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, timeout=300,
                   capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "VSPEC_SPECS"}
    env["PYTHONPATH"] = str(target)  # before site-packages, where the checkout's editable install is found
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert Path(result["vspec"]).is_relative_to(target)
    assert result["presets"] == [p for p in shipped if not p.startswith("_")] and len(result["presets"]) >= 80
    assert result["params"]["deit_tiny"] == 5_717_416 and result["params"]["bert_base"] == 109_483_778
    assert result["out"] == [2, 3]
