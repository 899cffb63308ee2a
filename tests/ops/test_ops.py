"""The functional core against references written from the definitions."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from vspec.ops import linear, sincos_1d, sincos_2d, vit
from vspec.ops.vit import ACTIVATIONS

REFERENCE_ACTS = {
    None: lambda y: y,
    "gelu": lambda y: 0.5 * y * (1 + torch.erf(y / math.sqrt(2))),
    "gelu_tanh": lambda y: 0.5 * y * (1 + torch.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y**3))),
    "relu": lambda y: y.clamp_min(0),
    "silu": lambda y: y * torch.sigmoid(y),
    "tanh": lambda y: (1 - torch.exp(-2 * y)) / (1 + torch.exp(-2 * y)),
}


@pytest.fixture(autouse=True, scope="module")
def onednn_on_any_cpu():
    """The oneDNN linear, which AVX-512 CPUs take at every size (vit.ONEDNN_WINS), checked on every CPU."""
    before, vit.ONEDNN_WINS = vit.ONEDNN_WINS, True
    yield
    vit.ONEDNN_WINS = before


@given(batch=st.integers(1, 3), tokens=st.integers(1, 9), c_in=st.integers(1, 24), c_out=st.integers(1, 24),
       bias=st.booleans(), act=st.sampled_from(sorted(ACTIVATIONS, key=str)), seed=st.integers(0, 2**16))
def test_linear_matches_definition_with_and_without_autograd(batch, tokens, c_in, c_out, bias, act, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, tokens, c_in, generator=g, requires_grad=True)
    w = torch.randn(c_out, c_in, generator=g, requires_grad=True)
    b = torch.randn(c_out, generator=g, requires_grad=True) if bias else None
    params = [t for t in (x, w, b) if t is not None]
    # reference in float64 from y = act(x W^T + b)
    x64, w64 = x.detach().double(), w.detach().double()
    pre = x64 @ w64.T + (b.detach().double() if bias else 0)
    expected = REFERENCE_ACTS[act](pre)
    with torch.no_grad():
        fused = linear(x, w, b, act)  # inference path: bias and activation fused
    assert torch.allclose(fused.double(), expected, atol=1e-5, rtol=1e-5)
    y = linear(x, w, b, act)  # autograd path
    assert torch.allclose(y.double(), expected, atol=1e-5, rtol=1e-5)
    grad_out = torch.randn(y.shape, generator=g)
    grads = torch.autograd.grad(y, params, grad_out)
    ref_params = [t.detach().double().requires_grad_() for t in params]
    ref = REFERENCE_ACTS[act](F.linear(*ref_params[:2], ref_params[2] if bias else None))
    ref_grads = torch.autograd.grad(ref, ref_params, grad_out.double())
    for got, want in zip(grads, ref_grads):
        assert torch.allclose(got.double(), want, atol=1e-4, rtol=1e-4)


def test_linear_gradcheck_float64():
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: linear(*a, act="gelu"), (x, w, b))


def test_linear_autograd_function_backward_against_float64_plain():
    """The bias-fused autograd.Function (float32) has the gradients of the plain matmuls."""
    torch.manual_seed(0)
    x = torch.randn(3, 5, 8, requires_grad=True)
    w = torch.randn(6, 8, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    y = linear(x, w, b)
    y.backward(torch.ones_like(y))
    assert torch.allclose(b.grad, torch.full((6,), 15.0))
    assert torch.allclose(w.grad, x.detach().sum((0, 1)).expand(6, 8), atol=1e-5)
    assert torch.allclose(x.grad, w.detach().sum(0).expand(3, 5, 8), atol=1e-5)


@pytest.mark.parametrize("act", list(ACTIVATIONS))
@pytest.mark.parametrize("bias", [True, False])
def test_bf16_autocast_fuses_bias_and_activation_where_the_cpu_has_native_bf16(act, bias, monkeypatch):
    """Under bf16 autocast, on a CPU with native bf16 matmuls, linear is oneDNN's kernel on the bf16 casts of x, W, b:
    without autograd bias and activation fused, with it the bias fused (`_BiasFusedLinear`, the activation after it);
    what autocast's F.linear and the activation give, within bf16's rounding, gradients of x, W and b (float32, as
    autocast's) too; elsewhere it is not called."""
    calls = []
    op = vit._ONEDNN
    monkeypatch.setattr(vit, "_ONEDNN", lambda *a: calls.append(a[0].dtype) or op(*a))
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(2, 9, 48, generator=g), torch.randn(40, 48, generator=g) / 7, torch.randn(40, generator=g)
    b = b if bias else None
    act_fn = ACTIVATIONS[act][2] or (lambda y: y)
    leaves = [t.double().requires_grad_() for t in (x, w, b) if t is not None]
    x64, w64, *b64 = leaves
    ref = act_fn(F.linear(x64, w64, b64[0] if b64 else None))
    native = vit._NATIVE_BF16 and op is not None
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        y = linear(x, w, b, act=act)
    assert calls == ([torch.bfloat16] if native else [])
    assert y.dtype == torch.bfloat16
    assert (y.double() - ref).abs().max() <= 2e-2 * ref.abs().max()
    calls.clear()
    ours = [t.clone().requires_grad_() for t in (x, w, b) if t is not None]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = linear(ours[0], ours[1], ours[2] if bias else None, act=act)  # training
    assert calls == ([torch.bfloat16] if native else [])
    assert y.dtype == torch.bfloat16 and (y.double() - ref).abs().max() <= 2e-2 * ref.abs().max()
    dy = torch.randn(y.shape, generator=g)
    y.backward(dy)
    ref.backward(dy.double())
    for mine, exact in zip(ours, leaves):
        assert mine.grad.dtype == torch.float32
        assert (mine.grad.double() - exact.grad).abs().max() <= 3e-2 * exact.grad.abs().max()


def test_bf16_inference_reuses_a_parameters_packed_copy_until_the_parameter_changes(monkeypatch):
    """In bf16 inference, a Parameter W is cast and reordered once (`vit.packed`) and reused while it is unchanged:
    the output equals oneDNN's on the per-call bf16 cast (PACK off), and an in-place write, a write through `.data`
    (which the version counter misses) and new storage each give a fresh reorder; a weight computed per call, autograd
    and a Parameter made under inference_mode none; the copy is dropped when autograd takes the Parameter again and
    with the Parameter. Without native bf16 (or the op) nothing is packed."""
    reorders = []
    op = vit._REORDER
    monkeypatch.setattr(vit, "_REORDER", op and (lambda w, rows: reorders.append(rows) or op(w, rows)))
    native = vit._NATIVE_BF16 and vit._ONEDNN is not None and op is not None and vit.fast.is_on()
    g = torch.Generator().manual_seed(0)
    w = torch.nn.Parameter(torch.randn(40, 96, generator=g) / 10)
    b = torch.nn.Parameter(torch.randn(40, generator=g))
    x = torch.randn(2, 7, 96, generator=g)

    def ours(weight, inputs=x, pack=True):
        monkeypatch.setattr(vit, "PACK", pack)
        with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
            return linear(inputs, weight, b, act="gelu")

    first = ours(w)
    assert reorders == ([14] if native else [])
    assert torch.equal(first, ours(w, pack=False)) and torch.equal(ours(w, x[:1]), first[:1])
    assert len(reorders) == (1 if native else 0)  # reused, for any row count
    with torch.no_grad():
        w.mul_(-1)  # in place: the version counter moves
    flipped = ours(w)
    assert torch.equal(flipped, ours(w, pack=False)) and not torch.equal(flipped, first)
    w.data.mul_(-1)  # through .data: the counter stays, the samples differ
    assert torch.equal(ours(w), first)
    w.data = w.data.clone()  # new storage, the same values
    assert torch.equal(ours(w), first)
    assert len(reorders) == (4 if native else 0)
    assert torch.equal(ours(w.detach() * 1), first)  # not a Parameter: cast per call
    held = len(vit._PACKED)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        linear(x, w, b).sum().backward()  # autograd: the differentiable cast; the stale copy freed
    assert w.grad is not None and len(reorders) == (4 if native else 0)
    assert len(vit._PACKED) == held - (1 if native else 0)
    ours(w)  # packed afresh
    assert len(reorders) == (5 if native else 0)
    held = len(vit._PACKED)
    del w
    assert len(vit._PACKED) == held - (1 if native else 0)
    with torch.inference_mode():  # an inference tensor has no version counter: cast per call
        made_there = torch.nn.Parameter(torch.randn(40, 96, generator=g))
        assert torch.equal(ours(made_there), ours(made_there, pack=False))
    assert len(reorders) == (5 if native else 0)


def test_sincos_1d_definition():
    length, dim = 7, 10
    table = sincos_1d(length, dim)
    for p in range(length):
        for i in range(dim // 2):
            angle = p / 10000 ** (2 * i / dim)
            assert math.isclose(table[p, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[p, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)


def test_sincos_2d_definition():
    h, w, dim = 3, 4, 16
    table = sincos_2d(h, w, dim)
    quarter = dim // 4
    assert table.shape == (h * w, dim)
    for r in range(h):
        for c in range(w):
            row = table[r * w + c]
            for k in range(quarter):
                omega = 1 / 10000 ** (k / (quarter - 1))
                want = (math.sin(c * omega), math.cos(c * omega), math.sin(r * omega), math.cos(r * omega))
                got = [row[j * quarter + k].item() for j in range(4)]
                assert all(math.isclose(g_, w_, abs_tol=1e-6) for g_, w_ in zip(got, want))


@pytest.mark.parametrize("mask_shape", [(1, 3, 5, 5), (2, 3, 5, 5), (3, 5, 5)])
def test_attention_core_with_a_learnable_mask_is_sdpa(mask_shape):
    """Swin's attention core writes the math out for a mask that needs a gradient on the CPU (the
    relative position bias): outputs and every gradient equal SDPA's."""
    from vspec.nn.swin import BiasedAttentionCore

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.randn(*mask_shape, dtype=torch.float64, requires_grad=True)
    core = BiasedAttentionCore(scale=0.7)
    out = core(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.7)
    assert torch.allclose(out, ref, atol=1e-12)
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v, mask), g), torch.autograd.grad(ref, (q, k, v, mask), g)):
        assert torch.allclose(a, b, atol=1e-12)
    with torch.no_grad():  # no gradient wanted: SDPA itself
        assert torch.allclose(core(q, k, v, mask), ref, atol=1e-12)
