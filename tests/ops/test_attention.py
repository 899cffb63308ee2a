"""vspec/ops/attention.py: `sdpa` in half precision on every CPU, torch's AVX2 kernels on an AMX CPU
included (torch 2.14's flash kernel raises there: `pack_vnni2 is only supported when avx512 is supported`), and
ShortAttention, its path for bf16 training: the equation and its gradients, as close to it as SDPA's kernel, taken
where it is chosen."""

import os
import subprocess
import sys

import pytest
import torch

from vspec.ops import attention, fast
from vspec.ops.attention import ShortAttention, sdpa
from vspec.ops.dropout import keep_mask

HALF = """
import torch
from vspec.ops.attention import sdpa
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


# ---------------------------------------------------------------- ShortAttention (bf16 training at short lengths)
def attention_eq(q, k, v, mask=None, scale=None, keep=None, p_drop=0.0):
    """Eq. 1 written out in float64: softmax(q k^T * scale + mask) v, the dropout's keep mask applied to P (its keep
    probability 1 - p_drop at the 2^-16 resolution `keep_mask` draws with)."""
    q, k, v = q.double(), k.double(), v.double()
    logits = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else logits + mask.double()
    p = logits.softmax(-1)
    return (p if keep is None else p * keep / (1 - round(p_drop * 2**16) / 2**16)) @ v


def leaves(*shapes, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.float64).to(dtype).requires_grad_() for s in shapes]


@pytest.mark.parametrize("case", ["plain", "float mask with a gradient", "boolean mask", "dropout"])
def test_short_attention_is_the_equation_with_its_gradients_in_float64(case):
    q, k, v = leaves((2, 3, 7, 4), (2, 3, 9, 4), (2, 3, 9, 5))
    mask, p_drop = None, 0.0
    if case == "float mask with a gradient":  # Swin's bias: one per head, broadcast over the batch
        mask = leaves((3, 7, 9), seed=1)[0]
    if case == "boolean mask":  # a key-padding mask
        mask = (torch.arange(9) < 6)[None, None, None]
    if case == "dropout":
        p_drop = 0.3

    def run(q, k, v, *m):
        torch.manual_seed(0)  # the same keep mask at every call
        return ShortAttention.apply(q, k, v, m[0] if m else mask, 0.4, p_drop)

    inputs = (q, k, v, mask) if case == "float mask with a gradient" else (q, k, v)
    assert torch.autograd.gradcheck(run, inputs)
    keep = None
    if p_drop:
        torch.manual_seed(0)
        keep = keep_mask((2, 3, 7, 9), p_drop)
    assert torch.allclose(run(*inputs), attention_eq(q, k, v, mask, 0.4, keep, p_drop))


SHAPES = [(4, 3, 197, 64), (8, 6, 49, 32), (2, 12, 128, 64)]  # DeiT-Ti, Swin's windows, BERT at 128 tokens


def errors(out, grads, ref, ref_grads):
    """The largest error of the output and of each gradient, relative to the reference's largest magnitude."""
    return [((a.double() - b).abs().max() / b.abs().max()).item() for a, b in zip((out, *grads), (ref, *ref_grads))]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("masked", [False, True])
def test_bf16_training_attention_is_as_close_to_the_equation_as_sdpa(shape, masked, monkeypatch):
    """The path `sdpa` takes for bf16 training (ShortAttention on CPUs with native bf16) against SDPA's own bf16
    kernel and the float64 equation: outputs and gradients, with a float mask that needs a gradient too."""
    monkeypatch.setattr(attention, "_NATIVE_BF16", True)  # take the path on any CPU (emulated bf16 is exact too)
    b, h, n, d = shape
    q, k, v = leaves(shape, shape, shape, seed=2)
    mask = leaves((h, n, n), seed=3)[0] if masked else None
    ref = attention_eq(q, k, v, mask)
    ref_grads = torch.autograd.grad(ref, (q, k, v, *([mask] if masked else [])), torch.ones_like(ref))
    results = []
    for fast_on in (True, False):  # False: F.scaled_dot_product_attention itself
        q16, k16, v16 = (x.detach().bfloat16().requires_grad_() for x in (q, k, v))
        m = mask.detach().float().requires_grad_() if masked else None
        with fast.fast_paths(fast_on):
            assert attention.short_path(q16, k16, v16, m) is fast_on
            out = sdpa(q16, k16, v16, attn_mask=m)
        grads = torch.autograd.grad(out, (q16, k16, v16, *([m] if masked else [])), torch.ones_like(out))
        results.append(errors(out, grads, ref, ref_grads))
    short, flash = results
    for ours, theirs in zip(short, flash):  # bf16's own rounding, at most a few times SDPA's
        assert ours < max(4 * theirs, 2e-2), (short, flash)


def test_the_short_path_is_taken_only_where_it_wins(monkeypatch):
    monkeypatch.setattr(attention, "_NATIVE_BF16", True)
    q, k, v = (torch.randn(1, 2, 16, 8, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    assert attention.short_path(q, k, v)
    assert not attention.short_path(q.float(), k.float(), v.float())  # float32: SDPA
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert attention.short_path(q.float(), k.float(), v.float())  # bf16 autocast: cast like SDPA
    monkeypatch.setattr(attention, "SHORT_INFERENCE", False)
    with torch.no_grad():
        assert not attention.short_path(q, k, v)  # inference with AMX: SDPA's flash forward holds no map
    assert not attention.short_path(*(x.detach() for x in (q, k, v)))  # nothing needs a gradient: inference
    monkeypatch.setattr(attention, "SHORT_INFERENCE", True)
    with torch.no_grad():
        assert attention.short_path(q, k, v)  # inference without AMX: ahead of SDPA's flash forward too
    long = torch.randn(1, 2, attention.SHORT_KEYS + 1, 8, dtype=torch.bfloat16)
    assert not attention.short_path(q, long, long)
    monkeypatch.setattr(attention, "MAP_ELEMENTS", 2 * 16 * 16 - 1)  # (1, 2, 16, 16): one element over
    assert not attention.short_path(q, k, v)
    monkeypatch.setattr(attention, "MAP_ELEMENTS", 2 * 16 * 16)
    assert attention.short_path(q, k, v)
    assert not attention.short_path(q, k, v, attn_mask=torch.zeros(16, 16, dtype=torch.bool))  # no key left
    left_padded = (torch.arange(16) > 0)[None, None, None]  # query 0 sees key 0 only, which is padding
    assert attention.short_path(q, k, v, attn_mask=left_padded)
    assert not attention.short_path(q, k, v, attn_mask=left_padded, is_causal=True)
    assert attention.short_path(q, k, v, dropout_p=0.5)
    assert not attention.short_path(q, k, v, dropout_p=1 - 2**-18)  # rounds to dropping all: SDPA's draw
    monkeypatch.setattr(attention, "_NATIVE_BF16", False)
    assert not attention.short_path(q, k, v)  # emulated bf16: SDPA


@pytest.mark.parametrize("mask_shape", [None, (3, 49, 49), (2, 3, 49, 49)])
@pytest.mark.parametrize("sliced", [False, True])
def test_bf16_inference_attention_is_as_close_to_the_equation_as_sdpa(mask_shape, sliced, monkeypatch):
    """Where inference takes ShortAttention too (SHORT_INFERENCE: native bf16 without AMX), its output under no_grad,
    bf16 and bf16 autocast, against the float64 equation, as close as SDPA's own bf16 kernel (within 4x); whole, or
    in slices of one sample's map (_SLICE_MAP), with a mask shared by the samples or one of its own per sample."""
    monkeypatch.setattr(attention, "_NATIVE_BF16", True)
    monkeypatch.setattr(attention, "SHORT_INFERENCE", True)
    if sliced:
        monkeypatch.setattr(attention, "_SLICE_MAP", 3 * 49 * 49)
    shape = (2, 3, 49, 32)
    q, k, v = leaves(shape, shape, shape, seed=4)
    mask = leaves(mask_shape, seed=5)[0].detach() if mask_shape else None
    ref = attention_eq(q, k, v, mask).detach()
    calls = []
    apply = ShortAttention.apply
    monkeypatch.setattr(ShortAttention, "apply", lambda *a: calls.append(a[0].shape[0]) or apply(*a))
    for autocast in (False, True):
        q16, k16, v16 = (x.detach().float() if autocast else x.detach().bfloat16() for x in (q, k, v))
        m = None if mask is None else mask.float()
        errs = []
        for fast_on in (True, False):
            with torch.no_grad(), fast.fast_paths(fast_on), torch.autocast("cpu", torch.bfloat16, enabled=autocast):
                out = sdpa(q16, k16, v16, attn_mask=m)
            errs.append(((out.double() - ref).norm() / ref.norm()).item())
        assert errs[0] < max(4 * errs[1], 2e-2), errs
    assert calls == ([1, 1] if sliced else [2]) * 2


@pytest.mark.parametrize("case", ["padding mask", "causal", "keys shared by the heads", "keys over fewer axes",
                                  "queries broadcast"])
def test_inference_slices_equal_the_whole_map(case, monkeypatch):
    """`sdpa` in inference where SHORT_INFERENCE: sliced (one sample per slice) equals ShortAttention on the whole map,
    with a boolean padding mask, the causal one, keys shared by the heads; keys over fewer axes and queries broadcast
    against the keys stay whole."""
    monkeypatch.setattr(attention, "_NATIVE_BF16", True)
    monkeypatch.setattr(attention, "SHORT_INFERENCE", True)
    monkeypatch.setattr(attention, "_SLICE_MAP", 1)
    b, h, n, d = 3, 2, 16, 8
    q_shape, k_shape = {"keys shared by the heads": ((b, h, n, d), (b, 1, n, d)),
                        "keys over fewer axes": ((b, h, n, d), (h, n, d)),
                        "queries broadcast": ((b, 1, n, d), (b, h, n, d))}.get(case, ((b, h, n, d), (b, h, n, d)))
    q, k, v = (x.detach().bfloat16() for x in leaves(q_shape, k_shape, k_shape, seed=6))
    mask = (torch.arange(n) < torch.tensor([16, 9, 4])[:, None])[:, None, None] if case == "padding mask" else None
    causal = case == "causal"
    calls = []
    apply = ShortAttention.apply
    monkeypatch.setattr(ShortAttention, "apply", lambda *a: calls.append(a[0].shape[0]) or apply(*a))
    with torch.no_grad():
        out = sdpa(q, k, v, attn_mask=mask, is_causal=causal)
        whole = apply(q, k, v, attention._with_causal(q, k, mask) if causal else mask, d ** -0.5, 0.0)
    torch.testing.assert_close(out, whole, rtol=0, atol=0)
    stays_whole = case in ("keys over fewer axes", "queries broadcast")
    assert calls == ([q.shape[0]] if stays_whole else [1] * b)


def test_inference_counts_one_slice_s_map(monkeypatch):
    """In inference (SHORT_INFERENCE) MAP_ELEMENTS bounds one sample's map, the slices' unit; in training the
    whole."""
    monkeypatch.setattr(attention, "_NATIVE_BF16", True)
    monkeypatch.setattr(attention, "SHORT_INFERENCE", True)
    q, k, v = leaves((4, 2, 16, 8), (4, 2, 16, 8), (4, 2, 16, 8), dtype=torch.bfloat16)
    monkeypatch.setattr(attention, "MAP_ELEMENTS", 2 * 16 * 16)  # one sample's map; the whole is 4 times it
    assert not attention.short_path(q, k, v)
    with torch.no_grad():
        assert attention.short_path(q, k, v)
    monkeypatch.setattr(attention, "MAP_ELEMENTS", 2 * 16 * 16 - 1)
    with torch.no_grad():
        assert not attention.short_path(q, k, v)


def test_causal_and_padding_masks_on_the_short_path(monkeypatch):
    monkeypatch.setattr(attention, "_NATIVE_BF16", True)
    q, k, v = leaves((2, 2, 12, 8), (2, 2, 12, 8), (2, 2, 12, 8), dtype=torch.bfloat16, seed=4)
    padding = (torch.arange(12) < torch.tensor([[12], [9]]))[:, None, None]  # (B, 1, 1, M)
    out = sdpa(q, k, v, attn_mask=padding, is_causal=True)
    both = padding & torch.ones(12, 12, dtype=torch.bool).tril()
    assert (out.double() - attention_eq(q, k, v, both)).abs().max() < 3e-2


# ---------------------------------------------------------------- the softmax's route on bf16 rows
@pytest.mark.parametrize("lanes, floats, bf16s", [
    (32, [16, 24, 40, 48, 49, 56, 72, 104, 120, 136, 152], [8, 12, 15, 32, 36, 64, 96, 100, 128, 168, 197, 256]),
    (16, [8, 12, 24, 36, 40, 52, 56, 72, 78], [4, 7, 16, 32, 49, 64, 81, 88, 100, 197]),
    (0, [], [16, 40, 49, 72])])
def test_the_float32_softmax_is_taken_where_the_bf16_rows_leave_a_long_remainder(lanes, floats, bf16s):
    """`float_softmax`: float32 where keys mod lanes >= lanes / 4 and lanes / 2 <= keys <= 5 lanes; the bf16 kernel
    elsewhere, and on kernels without bf16 vectors (lanes 0)."""
    assert [k for k in floats if not attention.float_softmax(k, lanes)] == []
    assert [k for k in bf16s if attention.float_softmax(k, lanes)] == []


@pytest.mark.parametrize("keys", [40, 49])
@pytest.mark.parametrize("mask_kind", [None, "float, per head", "padding, per sample"])
def test_both_softmax_routes_are_the_equation_in_bf16(keys, mask_kind, monkeypatch):
    """ShortAttention in bf16, forward and backward, with its softmax in float32 (lanes 32: 40 and 49 keys) and in bf16
    (lanes 0) against the float64 equation (relative norm of the error): the float32 route, which adds a float mask
    unrounded, is as close to it as the bf16 one (within 1.25x). The route taken is the one asked for (the softmax's
    input dtype); the float32 route in slices of one sample's map equals it whole, bit for bit."""
    b, h, d = 4, 3, 16
    q, k, v = leaves((b, h, keys, d), (b, h, keys, d), (b, h, keys, d), seed=7)
    mask = {"float, per head": lambda: leaves((h, keys, keys), seed=8)[0],
            "padding, per sample": lambda: (torch.arange(keys) < torch.tensor([keys, 30, 11, 1])[:, None])[:, None,
                                                                                                            None]}
    mask = mask[mask_kind]() if mask_kind else None
    floats = mask is not None and mask.is_floating_point()
    ref = attention_eq(q, k, v, mask, 0.25)
    ref_grads = torch.autograd.grad(ref, (q, k, v, *([mask] if floats else [])), torch.ones_like(ref))
    softmax, seen = torch.softmax, []
    monkeypatch.setattr(torch, "softmax", lambda s, dim: seen.append(s.dtype) or softmax(s, dim))

    def run(lanes, slice_map=2**20):
        monkeypatch.setattr(attention, "_BF16_LANES", lanes)
        monkeypatch.setattr(attention, "_SLICE_MAP", slice_map)
        q16, k16, v16 = (x.detach().bfloat16().requires_grad_() for x in (q, k, v))
        m = mask.detach().float().requires_grad_() if floats else mask
        out = ShortAttention.apply(q16, k16, v16, m, 0.25, 0.0)
        assert out.dtype == torch.bfloat16 and seen[-1] == (torch.float32 if lanes else torch.bfloat16)
        return out, torch.autograd.grad(out, (q16, k16, v16, *([m] if floats else [])), torch.ones_like(out))

    errs = {}
    for lanes in (32, 0):
        out, grads = run(lanes)
        errs[lanes] = [((a.double() - r).norm() / r.norm()).item() for a, r in zip((out, *grads), (ref, *ref_grads))]
    assert max(errs[0]) < 1e-2 and all(a <= 1.25 * r for a, r in zip(errs[32], errs[0])), errs
    whole, sliced = run(32), run(32, slice_map=h * keys * keys)
    assert len(seen) == 3 + b  # the three whole runs' softmax, then one per sample
    assert all(torch.equal(a, c) for a, c in zip((whole[0], *whole[1]), (sliced[0], *sliced[1])))


def test_the_float32_softmax_adds_a_float_mask_unrounded(monkeypatch):
    """At 49 keys (lanes 32) the softmax of bf16 logits plus a float32 mask of magnitude ~100 (where bf16 holds steps
    of 0.5) is the float64 softmax of their exact sum, to bf16's rounding (2^-8 relative)."""
    monkeypatch.setattr(attention, "_BF16_LANES", 32)
    g = torch.Generator().manual_seed(9)
    s = torch.randn(2, 3, 49, 49, generator=g).bfloat16()
    mask = 100 + torch.randn(3, 49, 49, generator=g)
    ref = torch.softmax(s.double() + mask.double(), -1)
    p = attention._masked_softmax(s.clone(), mask)
    assert p.dtype == torch.bfloat16 and ((p.double() - ref).abs() <= 2**-8 * ref).all()
