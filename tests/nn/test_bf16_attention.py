"""bf16 training on the CPU: every attention kind that reduces to softmax(q k^T) v (ViT's, Swin's biased windows,
MSF's Gaussian kernel, iRPE's contextual bias, the text bodies' bidirectional and causal attention; Refiner's maps
are materialised by its own core) takes ShortAttention (vspec/ops/attention.py) under bf16 autocast, and computes
what SDPA's own bf16 kernel does (the fast paths off) within bf16's rounding: logits and every parameter's gradient."""

import copy
from types import SimpleNamespace

import pytest
import torch

import vspec
from tests.helpers.shrunk import small_spec
from vspec.ops import attention
from vspec.ops import dropout as dropout_ops

KINDS = ["deit_tiny", "swin_tiny", "msf_vit_ti", "deit_tiny_irpe_k", "bert_base", "gpt"]


def bf16_step(model, x):
    """Logits and gradients of one bf16-autocast training step (seeded: drop path and dropout draw the same)."""
    torch.manual_seed(1)
    model.train().zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    out.float().square().mean().backward()
    return out.float().detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", KINDS)
def test_bf16_training_takes_short_attention_and_agrees_with_sdpa(name, monkeypatch):
    monkeypatch.setattr(attention, "_NATIVE_BF16", True)  # the CPU's choice, taken on any CPU
    # the hidden dropout draws its masks one way in both runs (the fast paths' switch would change the draw)
    monkeypatch.setattr(dropout_ops, "fast", SimpleNamespace(enabled=lambda x: True))
    calls = []
    apply = attention.ShortAttention.apply
    monkeypatch.setattr(attention.ShortAttention, "apply", lambda *a: calls.append(1) or apply(*a))
    spec = small_spec(name)
    if hasattr(spec.stages[0].blocks[0].attention, "attn_drop"):  # SDPA's dropout draws otherwise
        spec = vspec.override(spec, {f"stages.{i}.block.attention.attn_drop": 0.0 for i in range(len(spec.stages))}
                              if len(spec.stages) > 1 else {"block.attention.attn_drop": 0.0})
    torch.manual_seed(0)
    model = vspec.build(spec)
    x = vspec.example_input(spec, 2)
    out_short, grads_short = bf16_step(copy.deepcopy(model), x)
    assert calls, "ShortAttention was not taken"
    calls.clear()
    with vspec.fast_paths(False):
        out_sdpa, grads_sdpa = bf16_step(copy.deepcopy(model), x)
    assert not calls
    assert grads_short.keys() == grads_sdpa.keys()
    tol = 0.1  # bf16: 8 bits of mantissa, a few layers deep; relative to each tensor's largest magnitude
    assert (out_short - out_sdpa).abs().max() <= tol * out_sdpa.abs().max()
    for n, g in grads_sdpa.items():
        assert (grads_short[n] - g).abs().max() <= tol * g.abs().max() + 1e-6, n
