"""vspec/ops/precision.py's `native_bf16`: the CPU's native bf16, from torch's checks monkeypatched every way (never
the CPU at hand's), agreeing with the CPU's own flags, blind to ATen's kernel level, off where oneDNN is capped below
AVX-512."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vspec.ops import precision
from vspec.ops.precision import native_bf16


@pytest.mark.parametrize("amx,avx512_bf16,onednn,expected", [
    (True, True, True, "AMX"), (True, False, True, "AMX"), (False, True, True, "AVX-512 BF16"),
    (False, False, True, None), (True, True, False, None), (False, True, False, None)])
def test_native_bf16_is_amx_then_avx512_bf16_where_onednn_takes_bf16(monkeypatch, amx, avx512_bf16, onednn, expected):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(precision.torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: onednn, raising=False)
    assert native_bf16() == expected


def test_native_bf16_is_none_where_torchs_checks_are_missing_or_fail(monkeypatch):
    """Private functions: one that a torch lacks, or that raises, means no."""
    monkeypatch.setattr(precision.torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True, raising=False)
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: 1 / 0)
    assert native_bf16() is None
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert native_bf16() == "AVX-512 BF16"
    def fails():
        raise RuntimeError("no oneDNN here")

    monkeypatch.setattr(precision.torch.ops.mkldnn, "_is_mkldnn_bf16_supported", fails, raising=False)
    assert native_bf16() is None


CPUINFO = Path("/proc/cpuinfo")


def _said(**env) -> str:
    code = "from vspec.ops.precision import native_bf16; print(native_bf16())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_native_bf16_is_the_cpus_flags_whatever_atens_kernels_and_none_with_onednn_below_avx512():
    """On Linux, the kernel's flags (amx_bf16, avx512_bf16) say the same; ATEN_CPU_CAPABILITY=avx2 changes nothing
    (oneDNN's products still take AMX there); ONEDNN_MAX_CPU_ISA=AVX2 turns it off (bf16 products then emulated)."""
    found = _said()
    if CPUINFO.is_file() and "ONEDNN_MAX_CPU_ISA" not in os.environ:
        flags = set(next((line for line in CPUINFO.read_text().splitlines() if line.startswith("flags")), "").split())
        assert found == ("AMX" if "amx_bf16" in flags else "AVX-512 BF16" if "avx512_bf16" in flags else "None")
    assert _said(ATEN_CPU_CAPABILITY="avx2") == found
    assert _said(ONEDNN_MAX_CPU_ISA="AVX2") == "None"
