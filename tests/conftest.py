"""Shared test settings: small Hypothesis runs drawn the same way every run (VSPEC_HYPOTHESIS_PROFILE=thorough
explores: 1000 random examples each), no example database written into the checkout."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, settings

import vspec
from tests.helpers import ROOT

settings.register_profile(
    "vspec",
    max_examples=25,
    deadline=None,
    database=None,
    derandomize=True,  # `make test` and CI draw the same examples every run; "thorough" explores
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("vspec"), max_examples=1000, derandomize=False)
settings.load_profile(os.environ.get("VSPEC_HYPOTHESIS_PROFILE", "vspec"))

# No test downloads: Hugging Face's offline switch on, and the download caches (Hugging Face's, torch hub's) and
# vspec's own are empty folders of this session, never the user's (subprocesses inherit them).
os.environ["HF_HUB_OFFLINE"] = "1"
_CACHES = Path(tempfile.mkdtemp(prefix="vspec-test-caches-"))
atexit.register(shutil.rmtree, _CACHES, True)
for _var in ("HF_HUB_CACHE", "TORCH_HOME", "VSPEC_CACHE"):
    os.environ[_var] = str(_CACHES / _var.lower())


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """Empty Hugging Face, torch hub and vspec caches, offline."""
    roots = {"hf": tmp_path / "hf", "torch": tmp_path / "torch", "vspec": tmp_path / "vspec"}
    monkeypatch.setenv("HF_HUB_CACHE", str(roots["hf"]))
    monkeypatch.setenv("TORCH_HOME", str(roots["torch"]))
    monkeypatch.setenv("VSPEC_CACHE", str(roots["vspec"]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return roots


def pytest_terminal_summary(terminalreporter):
    """The documentation's examples: how many blocks ran, how many are marked not run (tests/test_docs.py)."""
    import sys

    docs = sys.modules.get("tests.test_docs")
    if docs is None or not docs.COUNTS:
        return
    counts = docs.COUNTS
    marks = {k[len("not run: "):]: v for k, v in counts.items() if k.startswith("not run: ")}
    terminalreporter.write_line(
        f"docs examples: run {counts['python']} python and {counts['console']} console blocks "
        f"({counts['commands']} commands); marked not run {sum(marks.values())}"
        + (" (" + ", ".join(f"{reason}: {n}" for reason, n in sorted(marks.items())) + ")" if marks else ""))


@pytest.fixture(scope="module")
def tiny_spec(tmp_path_factory):
    """A 2-block, 32-wide ViT on 16 px images (4 px patches), 4 classes, with BatchNorm (SOPE + DAFF)."""
    spec = vspec.override(vspec.load_spec(ROOT / "specs/dhvt_tiny_cifar_p4.py"),
                          {"depth": 2, "dim": 32, "img_size": 16, "num_classes": 4})
    path = tmp_path_factory.mktemp("spec") / "tiny.json"
    path.write_text(vspec.to_json(spec))
    return path


@pytest.fixture(scope="module")
def text_spec(tmp_path_factory) -> Path:
    """A 1-block, 32-wide BERT-like body of 24 tokens and a 200-word vocabulary, with SoT's masked head."""
    spec = vspec.load_spec(ROOT / "specs/demo_text.py")
    spec = vspec.override(spec, {"depth": 1, "dim": 32, "block.attention.heads": 2, "block.ffn.hidden": 64,
                                 "embedder.vocab_size": 200, "embedder.seq_len": 24})
    spec = attrs.evolve(spec, head=vspec.spec.language_head(6, 4, drop=0.1))
    path = tmp_path_factory.mktemp("spec") / "text.json"
    path.write_text(vspec.to_json(spec))
    return path
