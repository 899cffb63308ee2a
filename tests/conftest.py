"""Shared test settings: small Hypothesis runs drawn the same way every run (VSPEC_HYPOTHESIS_PROFILE=thorough
explores: 1000 random examples each), no example database written into the checkout."""

import atexit
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

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

# the authors' reference outputs (../shared/fixtures/official beside the checkout, or $VSPEC_FIXTURES)
FIXTURES = Path(os.environ.get("VSPEC_FIXTURES",
                               Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "official"))

# Outputs stored on another machine (the authors' fixtures, tests/data/v1) are never compared bit-exactly: the
# float32 kernels of another CPU (AVX-512 or AVX2, another vendor) sum in another order. Measured on one machine,
# capabilities (ATEN_CPU_CAPABILITY default / avx2 / avx512): up to 5.4e-7 on the fixtures, 1.2e-6 on
# tests/data/v1's logits of magnitude 0.4.
# A wrong weight mapping moves an output by 1e-4 and far more (tests/test_migrate.py checks one).
STORED_ATOL = 1e-5


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """Empty Hugging Face, torch hub and vspec caches, offline."""
    roots = {"hf": tmp_path / "hf", "torch": tmp_path / "torch", "vspec": tmp_path / "vspec"}
    monkeypatch.setenv("HF_HUB_CACHE", str(roots["hf"]))
    monkeypatch.setenv("TORCH_HOME", str(roots["torch"]))
    monkeypatch.setenv("VSPEC_CACHE", str(roots["vspec"]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return roots


def assert_close_to_stored(got, stored) -> None:
    """`got`, computed here, equals `stored`, computed on another machine, within STORED_ATOL."""
    diff = (got - stored).abs().max().item()
    assert diff <= STORED_ATOL, f"{diff:.3g} from the stored output (tolerance {STORED_ATOL})"


def assert_same_function(ref, ours, x) -> None:
    """Two models (in eval mode) give equal outputs on `x` and equal input gradients of their squared sum, within
    float32 rounding: the same function, not only the same logits."""
    import torch

    x = x.clone().requires_grad_()
    ref_out, out = ref(x), ours(x)
    assert torch.allclose(ref_out, out, atol=1e-5)
    (grad_ref,) = torch.autograd.grad(ref_out.square().sum(), x)
    (grad,) = torch.autograd.grad(out.square().sum(), x)
    assert torch.allclose(grad_ref, grad, atol=1e-5 * grad.abs().max().item())


def perturbed(model, seed: int = 0):
    """`model` in eval mode with every weight moved off its initial value (LayerNorms off 1 / 0, biases off 0), so
    that a wrong mapping cannot hide behind an init."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    return model.eval()


def load_benchmark(name: str):
    """benchmarks/<name>.py as a module (the benchmarks are scripts, not a package)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_every_parameter_learns(model, rel: float | None = None, inert: tuple[str, ...] = ()) -> None:
    """After a backward pass: every parameter has a finite gradient, and none is zero up to rounding:
    its largest entry is above `rel` times the largest gradient entry of the model (default 1e-8 in
    float32; 1e-12 in float64, where a gradient that is zero by an invariance stays ~1e-16 and a small
    real one, behind a layer scale of 1e-5 say, does not). `inert`: the parameters that a released
    architecture cannot train (iRPE's last key table under a class-token head), which must be the dead ones."""
    import torch

    if rel is None:
        rel = 1e-12 if next(model.parameters()).dtype == torch.float64 else 1e-8
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), \
        [n for n, g in grads.items() if g is None or not torch.isfinite(g).all()]
    top = max(g.abs().max().item() for g in grads.values())
    dead = [n for n, g in grads.items() if g.abs().max().item() <= rel * top]
    assert sorted(dead) == sorted(inert), f"zero gradients: {dead}" + (f" (inert: {list(inert)})" if inert else "")


def argument_cases(cases: dict) -> dict:
    """`pytest.mark.parametrize` arguments for a converter's {constructor argument: [(changes, expect), ...]}."""
    return dict(argnames="changes,expect", argvalues=[case for group in cases.values() for case in group],
                ids=[f"{arg}-{i}" for arg, group in cases.items() for i in range(len(group))])


def check_argument(family: str, label: str, state_dict: dict, config: dict, expect) -> None:
    """`expect` a regex: converting `config` is refused in one line `<label> config: <expect>...`; otherwise a
    predicate the spec the converter makes of `config` satisfies (the argument is honoured)."""
    import pytest

    from vspec.convert import ConversionError, from_official, official

    if isinstance(expect, str):
        with pytest.raises(ConversionError, match=f"^{label} config: {expect}") as info:
            from_official(family, state_dict, config)
        assert "\n" not in str(info.value)
    else:
        assert expect(official()[family].spec_of(config))


def pytest_terminal_summary(terminalreporter):
    """The documentation's examples: how many blocks ran, how many are marked not run (tests/test_docs.py)."""
    import sys

    docs = sys.modules.get("test_docs")
    if docs is None or not docs.COUNTS:
        return
    counts = docs.COUNTS
    marks = {k[len("not run: "):]: v for k, v in counts.items() if k.startswith("not run: ")}
    terminalreporter.write_line(
        f"docs examples: run {counts['python']} python and {counts['console']} console blocks "
        f"({counts['commands']} commands); marked not run {sum(marks.values())}"
        + (" (" + ", ".join(f"{reason}: {n}" for reason, n in sorted(marks.items())) + ")" if marks else ""))
