"""torch.compile(fullgraph=True) on every preset, shrunk (tests/nn/test_bf16.py's `small`: same kinds, a fraction of
the work): dynamo traces each in one graph (no graph break) and the compiled model equals eager within 1e-4, in
eval and in training (outputs and gradients).

`make test` compiles deit_tiny, msf_vit_ti and refined_vit_s_dense with the aot_eager backend (dynamo and
AOTAutograd, the graphs run eagerly: ~5 s each here), in eval and training; the `slow` marker (`make test-slow`,
.ci/run) adds the other families' in training (SoT, DHVT, Swin, MSF-Swin: 10-30 s each), deit_tiny with inductor
(its C++ code: ~30 s on this 2-core machine) and every preset with aot_eager (eval). `python -m benchmarks.compile`
compiles every preset with inductor (~15-40 s each here) and prints the graph breaks, times and differences."""

from pathlib import Path

import pytest
import torch

from tests.helpers.shrunk import (
    shrunk,  # noqa: F401
    small_spec,
    train_steps,
    )
from vspec.nn.head_outputs import as_outputs
from vspec.nn.mix_token import TokenBox

ROOT = Path(__file__).resolve().parents[2]
SPEC_FILES = sorted((ROOT / "specs").glob("*.py"))
FAMILIES = ["deit_tiny", "sot_tiny", "dhvt_tiny_cifar_p4", "swin_tiny", "msf_vit_ti", "msf_swin_tiny",
            "refined_vit_s_dense"]
SLOW_FAMILIES = {"sot_tiny", "dhvt_tiny_cifar_p4", "swin_tiny", "msf_swin_tiny"}  # 10-30 s each here: make test-slow
TOLERANCE = 1e-4


def loss(out) -> torch.Tensor:
    """A weighted sum of every output's logits (a dense or late-fusion head trains several)."""
    return sum((o.logits * torch.linspace(-1, 1, o.logits.numel()).view_as(o.logits)).sum() for o in as_outputs(out))


def check_compiles(name: str, backend: str, train: bool = True) -> None:
    model, x, breaks = shrunk(name)
    assert breaks == 0
    with torch.no_grad():
        eager = model(x)
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True, backend=backend)(x)
    assert (compiled - eager).abs().max() < TOLERANCE
    if not train:
        return
    # the training forward with its outputs, as vspec train runs it; MixToken's box fixed (its draw reads torch's host
    # generator: a graph break); the shrunk presets keep their dropout / drop-path rates: one seed for both runs
    model.train().set_training_outputs(True, draw=lambda grid: TokenBox(0, 1, grid[0] // 2, grid[1], grid))
    params = [p for p in model.parameters() if p.requires_grad]
    torch.manual_seed(1)
    out = loss(model(x))
    grads = torch.autograd.grad(out, params)
    torch._dynamo.reset()
    torch.manual_seed(1)
    out_c = loss(torch.compile(model, fullgraph=True, backend=backend)(x))
    grads_c = torch.autograd.grad(out_c, params)
    assert (out_c - out).abs() < TOLERANCE * max(1.0, out.abs().item())
    worst = max((a - b).abs().max().item() for a, b in zip(grads, grads_c))
    assert worst < TOLERANCE, worst
    torch._dynamo.reset()


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_FAMILIES else n
                                  for n in FAMILIES])
def test_one_preset_of_each_family_compiles_in_one_graph(name):
    check_compiles(name, "aot_eager")


def test_grad_checkpointing_compiled_updates_batchnorm_statistics_once_a_step():
    """Compiled, checkpoint's recomputation is the compiler's (eager's keeps the BatchNorms' running statistics
    itself, vspec.nn.blocks.Stage.run): DHVT's blocks' BatchNorms are updated once a step, as without either."""
    spec = small_spec("dhvt_tiny_cifar_p4")
    torch._dynamo.reset()
    compiled = train_steps(spec, True, steps=2, wrap=lambda m: torch.compile(m, fullgraph=True, backend="aot_eager"))
    torch._dynamo.reset()
    plain = train_steps(spec, False, steps=2)
    assert {int(b) for n, b in compiled[0].items() if n.endswith("num_batches_tracked")} == {2}
    for key, b in plain[0].items():
        torch.testing.assert_close(compiled[0][key], b, rtol=0, atol=1e-6, msg=key)
    torch.testing.assert_close(compiled[2], plain[2], rtol=0, atol=1e-6)


@pytest.mark.slow  # inductor's C++ code, ~30 s: make test-slow
def test_inductor_compiles_deit_tiny(tmp_path, monkeypatch):
    # a cache of its own: inductor's on-disk cache does not key on ATEN_CPU_CAPABILITY, and kernels cached by a
    # run under the other capability gave NaN here (torch 2.14.1; a fresh cache gives 1.5e-8)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    check_compiles("deit_tiny", "inductor")


@pytest.mark.slow
@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.stem)
def test_every_preset_compiles_in_one_graph(path):
    check_compiles(path.stem, "aot_eager", train=False)
