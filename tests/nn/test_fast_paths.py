"""The one switch of vspec's CPU fast paths (vspec/ops/fast.py): with it off (`vspec.fast_paths(False)`, or
VSPEC_FAST_PATHS=0 in the environment) every family computes the same outputs and gradients as with it on,
the private ops are really skipped, torch versions outside the tested range fall back to the plain path,
and the profiler counts the same either way."""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vspec
from tests.helpers.shrunk import run, small_spec
from vspec.models.msf import ops as msf
from vspec.models.refiner import modules as nn_refiner
from vspec.nn.layers import AttentionCore
from vspec.ops import fast, vit

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ["deit_tiny", "swin_tiny", "msf_vit_ti", "refined_vit_s"]


class Calls:
    """Counts the calls that reach the fast paths' private ops and hand-written kernels."""

    def __init__(self, monkeypatch):
        self.n: dict[str, int] = {}
        monkeypatch.setattr(vit, "ONEDNN_WINS", True)  # the oneDNN linear at every size on any CPU
        for owner, name in [(vit, "_ONEDNN"), (msf, "_FLASH")]:
            monkeypatch.setattr(owner, name, self.counting(name, getattr(owner, name)))
        folded = nn_refiner.ConvExpandDLA.folded
        monkeypatch.setattr(nn_refiner.ConvExpandDLA, "folded", self.counting("folded", folded))
        plain_core = AttentionCore.forward  # Swin's biased core steps aside to it
        monkeypatch.setattr(AttentionCore, "forward", self.counting("sdpa_core", plain_core))

    def counting(self, name, fn):
        def wrapped(*args, **kwargs):
            self.n[name] = self.n.get(name, 0) + 1
            return fn(*args, **kwargs)
        return wrapped


@pytest.mark.parametrize("name", FAMILIES)
def test_fast_and_plain_paths_agree(name, monkeypatch):
    """Outputs (train and eval) and every gradient equal within float32 rounding, and the switch changes
    which path runs: the family's fast path is called with it on and never with it off."""
    spec = small_spec(name)
    torch.manual_seed(0)
    model = vspec.build(spec)
    x = vspec.example_input(spec, 2)
    calls = Calls(monkeypatch)
    out_fast, grads_fast = run(copy.deepcopy(model), x)
    fast_calls, calls.n = calls.n, {}
    with vspec.fast_paths(False):
        assert not fast.enabled(x)
        out_plain, grads_plain = run(copy.deepcopy(model), x)
    assert fast.enabled(x)  # back on after the block
    torch.testing.assert_close(out_fast, out_plain, rtol=1e-4, atol=1e-5)
    assert grads_fast.keys() == grads_plain.keys()
    scale = max(g.abs().max() for g in grads_plain.values())  # float32 sums in another order: rounding
    for n in grads_fast:
        torch.testing.assert_close(grads_fast[n], grads_plain[n], rtol=1e-3, atol=1e-5 * scale, msg=n)
    expected = {"deit_tiny": ["_ONEDNN"], "swin_tiny": ["_ONEDNN"], "msf_vit_ti": ["_FLASH"],
                "refined_vit_s": ["folded"]}[name]
    assert all(fast_calls.get(k, 0) > 0 for k in expected), fast_calls
    assert not any(calls.n.get(k, 0) for k in ["_ONEDNN", "_FLASH", "folded"]), calls.n
    if name == "swin_tiny":  # training on the CPU: the written-out biased attention, not SDPA, unless off
        assert fast_calls.get("sdpa_core", 0) < calls.n["sdpa_core"]


SUBPROCESS = """
import sys, torch, vspec
from tests.helpers.shrunk import run, small_spec
from vspec.ops import fast, vit
spec = small_spec("deit_tiny")
torch.manual_seed(0)
model = vspec.build(spec)
x = vspec.example_input(spec, 2)
calls = []
vit.ONEDNN_WINS = True
op = vit._ONEDNN
vit._ONEDNN = lambda *a: calls.append(1) or op(*a)
out, grads = run(model, x)
torch.save({"on": fast.is_on(), "calls": len(calls), "out": out, "grads": grads}, sys.argv[1])
"""


def test_environment_variable_turns_them_off(tmp_path):
    """VSPEC_FAST_PATHS=0 at start-up: no private op is called, and the results equal the default run's."""
    got = {}
    for value in ("1", "0"):
        env = {**os.environ, "VSPEC_FAST_PATHS": value, "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-c", SUBPROCESS, str(tmp_path / value)], cwd=ROOT, env=env, check=True)
        got[value] = torch.load(tmp_path / value)
    assert got["1"]["on"] and got["1"]["calls"] > 0
    assert not got["0"]["on"] and got["0"]["calls"] == 0
    torch.testing.assert_close(got["1"]["out"], got["0"]["out"], rtol=1e-4, atol=1e-5)
    for n, g in got["0"]["grads"].items():
        torch.testing.assert_close(got["1"]["grads"][n], g, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("version", [(2, 3), (2, 15), (3, 0)])
def test_private_ops_outside_the_tested_torch_are_not_used(version, monkeypatch):
    """A torch outside TESTED_TORCH, or an op it lacks, gives None (the plain path), never an error."""
    assert fast.private_op("mkldnn", "_linear_pointwise") is not None
    monkeypatch.setattr(fast, "_torch_version", lambda: version)
    assert fast.private_op("mkldnn", "_linear_pointwise") is None
    assert fast.private_op("aten", "_scaled_dot_product_flash_attention_for_cpu") is None


def test_missing_private_ops_fall_back_to_the_plain_path(monkeypatch):
    assert fast.private_op("aten", "_no_such_op_in_any_torch") is None
    assert fast.private_op("no_such_namespace", "op") is None
    spec = small_spec("msf_vit_ti")
    torch.manual_seed(0)
    model = vspec.build(spec)
    x = vspec.example_input(spec, 2)
    want = run(copy.deepcopy(model), x)[0]
    monkeypatch.setattr(vit, "_ONEDNN", None)
    monkeypatch.setattr(msf, "_FLASH", None)
    torch.testing.assert_close(run(model, x)[0], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_profiler_counts_with_the_switch_off(name, monkeypatch):
    """Equal counts whether the caller's switch is on or off, and no fast path runs while counting."""
    spec = small_spec(name)
    calls = Calls(monkeypatch)
    on = vspec.profile(spec).to_dict()
    with vspec.fast_paths(False):
        off = vspec.profile(spec).to_dict()
    assert on == off
    assert not any(calls.n.get(k, 0) for k in ["_ONEDNN", "_FLASH", "folded"]), calls.n
