"""vspec/ops/precision.py's `sdpa`: attention in half precision on every CPU, torch's AVX2 kernels on an AMX CPU
included (torch 2.14's flash kernel raises there: `pack_vnni2 is only supported when avx512 is supported`)."""

import os
import subprocess
import sys

import pytest
import torch

from vspec.ops.precision import sdpa

HALF = """
import torch
from vspec.ops.precision import sdpa
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 2, 128, 32, generator=g) for _ in range(3))
mask = (torch.arange(128) < 100)[None, None, None]  # (B, heads, queries, keys), broadcast
for dtype in (torch.bfloat16, torch.float16):
    leaves = [t.to(dtype).requires_grad_() for t in (q, k, v)]
    out = sdpa(*leaves, attn_mask=mask)
    out.float().sum().backward()
    ref = torch.softmax((q @ k.transpose(-2, -1) / 32 ** 0.5).masked_fill(~mask, float("-inf")), -1) @ v
    assert (out.float() - ref).abs().max() < 0.05, dtype
    assert all(torch.isfinite(t.grad).all() for t in leaves)
print("ok")
"""


@pytest.mark.parametrize("capability", [None, "avx2"])
def test_half_precision_attention_runs_under_any_kernels_and_is_the_equation(capability):
    env = {**os.environ, **({"ATEN_CPU_CAPABILITY": capability} if capability else {})}
    done = subprocess.run([sys.executable, "-c", HALF], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_sdpa_is_torchs_in_float32():
    q, k, v = (torch.randn(1, 2, 70, 16) for _ in range(3))
    assert torch.equal(sdpa(q, k, v, is_causal=True),
                       torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
