"""The compiler: random valid specs build into working modules with the parameter count the spec implies."""

from pathlib import Path

import attrs
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import valid_models
from torch import nn

from vspec.compiler import build
from vspec.spec import (
    DAFF,
    SOPE,
    MGCrP,
    SecondOrderHead,
    SoTEmbed,
    SvPN,
    MHSA,
    MLP,
    Block,
    ClassTokenHead,
    GAPHead,
    Model,
    Norm,
    PatchEmbed,
    SimplePatchEmbed,
    from_json,
    from_toml,
    load_spec,
    to_json,
    to_toml,
)

ROOT = Path(__file__).resolve().parents[1]
SPEC_FILES = sorted((ROOT / "specs").glob("*.py"))

torch.set_num_threads(2)


# ---------------------------------------------------------------------------------------------
# the parameter count, computed from the architecture definitions (independent of vspec.nn)


def layernorm_params(norm: Norm | None, width: int) -> int:
    """LayerNorm(width): weight + bias; kind none (or no norm) is the identity."""
    return 2 * width if norm is not None and norm.kind == "layernorm" else 0


def linear_params(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + (n_out if bias else 0)


def expected_params(spec: Model, num_classes: int | None = None) -> int:
    d = spec.dim
    nc = spec.num_classes if num_classes is None else num_classes
    p = spec.embedder.patch_size
    h, w = spec.img_size
    n_patches = (h // p) * (w // p)
    total = 0
    # embedder
    e = spec.embedder
    if isinstance(e, PatchEmbed):  # Conv2d(in_chans, d, kernel p, stride p)
        total += spec.in_chans * p * p * d + (d if e.bias else 0)
    elif isinstance(e, SoTEmbed):
        total += sot_dense_embed_params(e, spec.in_chans, d)
    elif isinstance(e, SOPE):  # affines (Eq. 1), k units of 3x3 conv (no bias) + BatchNorm (Eq. 2)
        k = e.patch_size.bit_length() - 1
        channels = [spec.in_chans] + [d // 2 ** (k - 1 - i) for i in range(k)]
        total += 2 * spec.in_chans * e.pre_affine + 2 * d * e.post_affine
        total += sum(c_in * c_out * 9 + 2 * c_out for c_in, c_out in zip(channels, channels[1:]))
    else:  # patchify -> LN(patch_dim) -> Linear(patch_dim, d) -> LN(d)
        patch_dim = spec.in_chans * p * p
        total += layernorm_params(e.norm, patch_dim) + linear_params(patch_dim, d) + layernorm_params(e.norm, d)
    # class token and position embedding
    if spec.class_token:
        total += d
    if spec.pos_embed == "learned":  # one row per token, class token included
        total += (n_patches + int(spec.class_token)) * d
    # blocks
    stack = list(spec.block) if isinstance(spec.block, tuple) else [spec.block] * spec.depth
    assert len(stack) == spec.depth
    for b in stack:
        a, f = b.attention, b.ffn
        inner = a.heads * (a.head_dim if a.head_dim is not None else d // a.heads)
        hidden = f.hidden if f.hidden is not None else int(d * f.ratio)
        total += 2 * layernorm_params(b.norm, d)  # norm1, norm2
        total += linear_params(d, 3 * inner, a.qkv_bias) + linear_params(inner, d, a.proj_bias)
        if isinstance(f, DAFF):  # 1x1 conv, depthwise kxk, 1x1 conv (with bias), BatchNorms, SE
            hidden = f.hidden if f.hidden is not None else int(d * f.ratio)
            assert f.spatial == "dwconv" and f.norm == "batchnorm" and f.cls == "reweight"
            r = d // f.se_reduction
            total += (d * hidden + hidden) + (f.kernel ** 2 * hidden + hidden) + (hidden * d + d)
            total += 2 * hidden + 2 * hidden + 2 * d + linear_params(d, r) + linear_params(r, d)
        else:
            total += linear_params(d, hidden, f.bias) + linear_params(hidden, d, f.bias)
        if b.head_tokens is not None:  # head embedding, Linear(d / h, d), LayerNorm(d / h)
            total += a.heads * d + linear_params(d // a.heads, d) + 2 * (d // a.heads)
        if b.layer_scale is not None:
            total += 2 * d  # one gamma per branch
    # final norm: the last block's norm kind
    if spec.final_norm:
        total += layernorm_params(stack[-1].norm, d)
    # head
    head = spec.head
    if isinstance(head, GAPHead):
        total += layernorm_params(head.norm, d)
    if isinstance(head, SecondOrderHead):  # MGCrP + svPN (learnable start) heads only
        pool = head.pool
        assert isinstance(pool, MGCrP) and isinstance(head.norm, SvPN) and head.norm.start == "learnable"
        total += d * pool.heads * (pool.m + pool.n) + pool.n  # W_i and R_i stacked; the start vector
        repr_dim = pool.heads * pool.m * pool.n
        widths = {"sum": [d, repr_dim], "late": [d, repr_dim], "concat": [d + repr_dim], "aggr_all": [repr_dim]}
        return total + (sum(linear_params(w, nc) for w in widths[head.fusion]) if nc > 0 else 0)
    if nc > 0:
        total += linear_params(d, nc)
    return total


def sot_dense_embed_params(e: SoTEmbed, in_chans: int, d: int) -> int:
    """SoT's DenseNet embedding (supplement A, released configuration): stem conv 3x3 (bias); three
    rounds of a 6-layer dense block (BN, 1x1 conv to 32, BN, 3x3 conv to 16) and a transition
    (BN, 1x1 conv to 128); a final 1x1 conv (bias) to d."""
    assert e.block == "dense"
    total = in_chans * e.stem_dim * 9 + e.stem_dim
    c = e.stem_dim
    for _ in range(3):
        for i in range(6):
            ci = c + 16 * i
            total += 2 * ci + ci * 32 + 2 * 32 + 32 * 16 * 9
        total += 2 * (c + 96) + (c + 96) * 128
        c = 128
    return total + 128 * d + d


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def n_tokens(spec: Model) -> int:
    p = spec.embedder.patch_size
    return (spec.img_size[0] // p) * (spec.img_size[1] // p) + int(spec.class_token)


def batch(spec: Model, n: int = 2) -> torch.Tensor:
    return torch.randn(n, spec.in_chans, *spec.img_size)


# ---------------------------------------------------------------------------------------------
# random specs


@given(spec=valid_models(), seed=st.integers(0, 2**16))
def test_build_forward_backward(spec, seed):
    torch.manual_seed(seed)
    model = build(spec)
    assert model.spec is spec
    x = batch(spec)

    model.eval()
    with torch.no_grad():
        out = model(x)
        again = model(x)
    assert out.shape == (2, spec.num_classes)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()
    assert torch.equal(out, again)  # eval mode is deterministic (no dropout, no drop path)

    model.train(spec.drop_path > 0 or bool(seed % 2))
    model.zero_grad(set_to_none=True)
    y = model(x)
    assert y.shape == (2, spec.num_classes) and torch.isfinite(y).all()
    y.sum().backward()
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    assert params
    for name, p in params:
        assert p.grad is not None, f"{name} got no gradient"
        assert p.grad.shape == p.shape
        assert torch.isfinite(p.grad).all(), f"{name} has a non-finite gradient"


@given(spec=valid_models())
def test_parameter_count_matches_spec(spec):
    torch.manual_seed(0)
    model = build(spec)
    assert n_params(model) == expected_params(spec)
    # position-embedding tables: a learned parameter, or a fixed buffer outside the state dict
    state = model.state_dict()
    if spec.pos_embed == "learned":
        assert isinstance(model.pos_embed, nn.Parameter)
        assert model.pos_embed.shape == (1, n_tokens(spec), spec.dim)
    elif spec.pos_embed in ("sincos1d", "sincos2d"):
        assert not isinstance(model.pos_embed, nn.Parameter)
        assert model.pos_embed.shape == (1, n_tokens(spec), spec.dim)
        assert "pos_embed" not in state
    else:
        assert model.pos_embed is None and "pos_embed" not in state


@settings(max_examples=20)
@given(spec=valid_models(), seed=st.integers(0, 2**16))
def test_timm_style_api(spec, seed):
    torch.manual_seed(seed)
    model = build(spec).eval()
    x = batch(spec)
    with torch.no_grad():
        feats = model.forward_features(x)
        assert feats.shape == (2, n_tokens(spec), spec.dim)
        pre = model.forward_head(feats, pre_logits=True)
        assert pre.shape == (2, spec.dim)
        logits = model.forward_head(feats)
        assert torch.allclose(logits, model(x), atol=1e-6)
        assert torch.allclose(logits, model.get_classifier()(pre), atol=1e-6)
    assert model.num_classes == spec.num_classes and model.num_features == spec.dim

    nwd = model.no_weight_decay()
    assert ("pos_embed" in nwd) == (spec.pos_embed == "learned")
    assert ("cls_token" in nwd) == spec.class_token
    assert nwd <= {"pos_embed", "cls_token"}
    named = dict(model.named_parameters())
    assert all(name in named for name in nwd)

    model.reset_classifier(5)
    assert model.num_classes == 5 and model.spec.num_classes == 5
    assert model.spec == attrs.evolve(spec, num_classes=5)
    assert model.get_classifier().out_features == 5
    assert n_params(model) == expected_params(spec, num_classes=5)
    with torch.no_grad():
        out5 = model(x)
        assert out5.shape == (2, 5) and torch.isfinite(out5).all()
        # the trunk is untouched by reset_classifier
        assert torch.allclose(model.forward_head(model.forward_features(x), pre_logits=True), pre, atol=1e-6)

    model.reset_classifier(0)
    assert model.num_classes == 0 and model.spec.num_classes == 0
    assert n_params(model) == expected_params(spec, num_classes=0)
    with torch.no_grad():
        out0 = model(x)
    assert out0.shape == (2, spec.dim)
    assert torch.allclose(out0, pre, atol=1e-6)


@settings(max_examples=15)
@given(spec=valid_models())
def test_meta_device_build_allocates_nothing(spec):
    model = build(spec, device="meta")
    tensors = [*model.parameters(), *model.buffers()]
    assert tensors
    assert all(t.is_meta for t in tensors)
    assert n_params(model) == expected_params(spec)
    torch.manual_seed(0)
    assert n_params(build(spec)) == n_params(model)
    assert not any(t.is_meta for t in build(spec).parameters())
    # shapes propagate on meta
    out = model(torch.empty(2, spec.in_chans, *spec.img_size, device="meta"))
    assert out.is_meta and out.shape == (2, spec.num_classes)


# ---------------------------------------------------------------------------------------------
# an independent reference forward pass (plain tensor ops, using the model's parameters)

REF_ACTS = {
    "gelu": lambda x: 0.5 * x * (1 + torch.erf(x / 2**0.5)),
    "gelu_tanh": lambda x: 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x**3))),
    "relu": lambda x: x.clamp_min(0),
    "silu": lambda x: x * torch.sigmoid(x),
}


def ref_linear(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    y = x @ layer.weight.t()
    return y if layer.bias is None else y + layer.bias


def ref_norm(layer: nn.Module, norm: Norm | None, x: torch.Tensor) -> torch.Tensor:
    if norm is None or norm.kind == "none":
        return x
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * layer.weight + layer.bias


def ref_mlp(ffn: nn.Module, act: str, x: torch.Tensor) -> torch.Tensor:
    return ref_linear(ffn.fc2, REF_ACTS[act](ref_linear(ffn.fc1, x)))


def reference_forward(model: nn.Module, spec: Model, x: torch.Tensor) -> torch.Tensor:
    """The architecture as documented in the spec classes, in eval mode."""
    b, c, h, w = x.shape
    p, d = spec.embedder.patch_size, spec.dim
    # patches in raster order, each flattened as (p1 p2 c)
    patches = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).reshape(b, -1, p * p * c)
    emb = model.embedder
    if isinstance(spec.embedder, PatchEmbed):  # the p x p stride-p convolution as a matmul
        weight = emb.proj.weight.permute(0, 2, 3, 1).reshape(d, -1)
        t = patches @ weight.t() + (emb.proj.bias if spec.embedder.bias else 0)
    else:
        t = ref_norm(emb.norm_in, spec.embedder.norm, patches)
        t = ref_norm(emb.norm_out, spec.embedder.norm, ref_linear(emb.proj, t))
    if spec.class_token:
        t = torch.cat((model.cls_token.expand(b, 1, d), t), dim=1)
    if spec.pos_embed != "none":
        t = t + model.pos_embed
    n = t.shape[1]
    for blk, bs in zip(model.blocks, spec.blocks):
        a = bs.attention
        hd = a.head_dim if a.head_dim is not None else d // a.heads
        qkv = ref_linear(blk.attn.qkv, ref_norm(blk.norm1, bs.norm, t))
        q, k, v = qkv.reshape(b, n, 3, a.heads, hd).permute(2, 0, 3, 1, 4)
        scale = a.scale if a.scale is not None else hd**-0.5
        attn = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1)
        o = ref_linear(blk.attn.proj, (attn @ v).transpose(1, 2).reshape(b, n, a.heads * hd))
        t = t + (o * blk.ls1.gamma if bs.layer_scale is not None else o)
        f = ref_mlp(blk.ffn, bs.ffn.act, ref_norm(blk.norm2, bs.norm, t))
        t = t + (f * blk.ls2.gamma if bs.layer_scale is not None else f)
    if spec.final_norm:
        t = ref_norm(model.norm, spec.blocks[-1].norm, t)
    if isinstance(spec.head, ClassTokenHead):
        pooled = t[:, 0]
    else:
        pooled = ref_norm(model.head.norm, spec.head.norm, t[:, int(spec.class_token):].mean(dim=1))
    return ref_linear(model.head.fc, pooled)


def perturbed(spec: Model, seed: int) -> nn.Module:
    """build(spec) with every parameter perturbed, so that norms, biases and layer scales all matter."""
    torch.manual_seed(seed)
    model = build(spec).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def grads(model: nn.Module, spec: Model, x: torch.Tensor, weights: torch.Tensor, reference: bool):
    x = x.clone().requires_grad_(True)
    out = reference_forward(model, spec, x) if reference else model(x)
    return torch.autograd.grad((out * weights).sum(), [*model.parameters(), x])


@given(spec=valid_models(), seed=st.integers(0, 2**16))
def test_forward_and_gradients_match_reference_float64(spec, seed):
    """In float64 (well away from rounding trouble): outputs and all gradients agree closely."""
    model = perturbed(spec, seed).double()
    x = batch(spec).double()
    weights = torch.randn(2, spec.num_classes, dtype=torch.float64)
    with torch.no_grad():
        expected = reference_forward(model, spec, x)
        assert torch.allclose(model(x), expected, rtol=1e-7, atol=1e-10)
    names = [name for name, _ in model.named_parameters()] + ["input"]
    for name, g, r in zip(names, grads(model, spec, x, weights, False), grads(model, spec, x, weights, True)):
        assert torch.allclose(g, r, rtol=1e-6, atol=1e-9), f"{name}: {(g - r).abs().max()}"


@given(spec=valid_models(), seed=st.integers(0, 2**16))
def test_float32_paths_match_reference(spec, seed):
    """float32 on the CPU (vspec's fused linear kernels): inference and autograd forward passes and the
    gradients agree with the float64 reference up to float32 rounding."""
    model = perturbed(spec, seed)
    x = batch(spec)
    weights = torch.randn(2, spec.num_classes)
    ref_model = perturbed(spec, seed).double()
    with torch.no_grad():
        expected = reference_forward(ref_model, spec, x.double()).float()
        inference = model(x)
    training = model(x)
    assert training.requires_grad
    for got in (inference, training):
        assert torch.allclose(got, expected, rtol=1e-3, atol=1e-4), (got - expected).abs().max()
    names = [name for name, _ in model.named_parameters()] + ["input"]
    ref_grads = grads(ref_model, spec, x.double(), weights.double(), True)
    for name, g, r in zip(names, grads(model, spec, x, weights, False), ref_grads):
        scale = max(1.0, r.abs().max().item())
        assert (g.double() - r).abs().max() <= 1e-3 * scale, f"{name}: {(g.double() - r).abs().max()}"


@pytest.mark.parametrize("act", [None, "gelu", "gelu_tanh", "relu", "silu"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7, 12), (2, 5, 12), (3, 1, 4, 12)])
@pytest.mark.parametrize("contiguous", [True, False])
def test_linear_op_matches_plain_linear(act, bias, shape, contiguous):
    from vspec.ops import linear

    torch.manual_seed(0)
    x = torch.randn(*shape[:-1], 2 * shape[-1])[..., ::2] if not contiguous else torch.randn(*shape)
    assert x.is_contiguous() == contiguous or x.ndim == 1
    w = torch.randn(9, shape[-1])
    b = torch.randn(9) if bias else None
    fn = {None: lambda t: t, **REF_ACTS}[act]
    expected = fn(x @ w.t() + (b if bias else 0))
    with torch.no_grad():
        assert torch.allclose(linear(x, w, b, act), expected, atol=1e-5)
    leaves = [t.clone().requires_grad_(True) for t in (x, w, *([b] if bias else []))]
    out = linear(*leaves[:2], leaves[2] if bias else None, act)
    assert torch.allclose(out, expected, atol=1e-5)
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, leaves, g)
    ref_leaves = [t.clone().requires_grad_(True) for t in leaves]
    ref_out = fn(ref_leaves[0] @ ref_leaves[1].t() + (ref_leaves[2] if bias else 0))
    want = torch.autograd.grad(ref_out, ref_leaves, g)
    for a, e in zip(got, want):
        assert a.shape == e.shape and torch.allclose(a, e, atol=1e-4)
    # only the weight needs a gradient (a frozen input, as in the first layer)
    wl = w.clone().requires_grad_(True)
    (gw,) = torch.autograd.grad(linear(x, wl, b, act), [wl], g)
    assert torch.allclose(gw, want[1], atol=1e-4)


@pytest.mark.parametrize("kind", ["sincos1d", "sincos2d"])
@pytest.mark.parametrize("class_token", [False, True])
def test_sincos_tables(kind, class_token):
    spec = tiny(pos_embed=kind, class_token=class_token, head=ClassTokenHead() if class_token else GAPHead())
    table = build(spec).pos_embed[0].double()
    d, temperature = spec.dim, 1e4
    gh, gw = spec.grid
    n_prefix = int(class_token)
    assert table.shape == (gh * gw + n_prefix, d)
    if kind == "sincos1d":  # PE[p, 2i] = sin(p / T^(2i/d)), PE[p, 2i+1] = cos(p / T^(2i/d)), over all tokens
        pos = torch.arange(table.shape[0], dtype=torch.float64)[:, None]
        i = torch.arange(d // 2, dtype=torch.float64)[None, :]
        angle = pos / temperature ** (2 * i / d)
        assert torch.allclose(table[:, 0::2], angle.sin(), atol=1e-6)
        assert torch.allclose(table[:, 1::2], angle.cos(), atol=1e-6)
    else:  # [sin(x w_k), cos(x w_k), sin(y w_k), cos(y w_k)], w_k = T^(-k / (d/4 - 1)); prefix rows zero
        q = d // 4
        assert torch.count_nonzero(table[:n_prefix]) == 0
        omega = temperature ** (-torch.arange(q, dtype=torch.float64) / (q - 1))
        for row in range(gh):
            for col in range(gw):
                got = table[n_prefix + row * gw + col]
                want = torch.cat(((col * omega).sin(), (col * omega).cos(), (row * omega).sin(), (row * omega).cos()))
                assert torch.allclose(got, want, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# fixed specs


def tiny(**changes) -> Model:
    base = dict(embedder=PatchEmbed(patch_size=8), block=Block(attention=MHSA(heads=4)), depth=3, dim=32,
                num_classes=7, img_size=(16, 32))
    return Model(**{**base, **changes})


def test_build_is_deterministic_under_seed():
    spec = tiny()
    torch.manual_seed(3)
    a = build(spec)
    torch.manual_seed(3)
    b = build(spec)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_drop_path_ramps_linearly_over_depth():
    model = build(tiny(drop_path=0.2))
    rates = [getattr(b.drop_path, "p", 0.0) for b in model.blocks]
    assert rates == pytest.approx([0.0, 0.1, 0.2])
    torch.manual_seed(0)
    model.train()
    x = batch(model.spec, 8)
    assert not torch.equal(model(x), model(x))  # stochastic in training
    model.eval()
    assert torch.equal(model(x), model(x))


def test_timm_init_vs_torch_init():
    torch.manual_seed(0)
    timm_init = build(tiny(init="timm"))
    torch.manual_seed(0)
    torch_init = build(tiny(init="torch"))
    for (name, p), (_, q) in zip(timm_init.named_parameters(), torch_init.named_parameters()):
        assert p.shape == q.shape, name
    fc1 = timm_init.blocks[0].ffn.fc1
    assert torch.count_nonzero(fc1.bias) == 0  # timm: zero Linear biases
    assert 0.015 < fc1.weight.std().item() < 0.025  # trunc-normal(std 0.02)
    assert timm_init.cls_token.abs().max() < 1e-4  # normal(1e-6)
    assert torch.count_nonzero(torch_init.blocks[0].ffn.fc1.bias) > 0  # PyTorch default: uniform biases


def test_components_follow_the_spec():
    spec = tiny(block=(Block(attention=MHSA(heads=2, head_dim=8, qkv_bias=False), ffn=MLP(hidden=24, act="relu"),
                             layer_scale=0.5),
                       Block(attention=MHSA(heads=4), ffn=MLP(ratio=2.0, bias=False, act="silu"),
                             norm=Norm(kind="none")),
                       Block(attention=MHSA(heads=1, scale=0.5), ffn=MLP(act="gelu_tanh"), norm=Norm(eps=1e-3))),
                head=GAPHead(norm=Norm(eps=1e-4)), class_token=False, final_norm=True)
    torch.manual_seed(0)
    model = build(spec)
    b0, b1, b2 = model.blocks
    assert b0.attn.qkv.weight.shape == (3 * 16, 32) and b0.attn.qkv.bias is None
    assert b0.attn.proj.weight.shape == (32, 16)
    assert b0.ffn.fc1.out_features == 24
    assert torch.equal(b0.ls1.gamma, torch.full((32,), 0.5))
    assert isinstance(b1.norm1, nn.Identity) and b1.ffn.fc1.bias is None and b1.ffn.fc1.out_features == 64
    assert b2.norm1.eps == 1e-3 and model.norm.eps == 1e-3  # final norm: the last block's norm
    assert model.head.norm.eps == 1e-4
    assert model.cls_token is None
    assert n_params(model) == expected_params(spec)
    # each block's MLP applies its own activation
    x = torch.randn(2, 5, 32)
    for blk, act in zip(model.blocks, ("relu", "silu", "gelu_tanh")):
        with torch.no_grad():
            assert torch.allclose(blk.ffn(x), ref_mlp(blk.ffn, act, x), atol=1e-5)


def test_gap_head_excludes_the_class_token():
    spec = tiny(head=GAPHead(), class_token=True, num_classes=0)
    model = build(spec).eval()
    feats = torch.randn(2, n_tokens(spec), spec.dim)
    pooled = model.forward_head(feats, pre_logits=True)
    assert torch.allclose(pooled, feats[:, 1:].mean(dim=1))
    spec = tiny(head=ClassTokenHead())
    model = build(spec).eval()
    assert torch.equal(model.forward_head(feats, pre_logits=True), feats[:, 0])


def test_simple_patch_embed_uses_patch_major_layout():
    """SimpleViT: patchify as (p1 p2 c), one row per patch in raster order."""
    spec = tiny(embedder=SimplePatchEmbed(patch_size=8, norm=Norm(kind="none")), in_chans=2, num_classes=0)
    model = build(spec)
    x = torch.randn(1, 2, 16, 32)
    tokens = model.embedder(x)
    assert tokens.shape == (1, 8, 32)
    patch = x[0, :, 8:16, 24:32].permute(1, 2, 0).reshape(-1)  # row 1, column 3 -> token 7
    assert torch.allclose(tokens[0, 7], model.embedder.proj(patch), atol=1e-5)


# ---------------------------------------------------------------------------------------------
# the preset specs


@pytest.mark.parametrize("path", SPEC_FILES, ids=[p.stem for p in SPEC_FILES])
def test_preset_specs(path):
    spec = load_spec(path)
    assert from_json(to_json(spec)) == spec
    assert from_toml(to_toml(spec)) == spec
    torch.manual_seed(0)
    model = build(spec).eval()
    if not isinstance(spec.embedder, SoTEmbed) or spec.embedder.block == "dense":
        assert n_params(model) == expected_params(spec)
    with torch.no_grad():
        out = model(torch.randn(1, 3, *spec.img_size))
    assert out.shape == (1, spec.num_classes)
    assert torch.isfinite(out).all()


def test_presets_exist():
    assert {p.stem for p in SPEC_FILES} >= {"deit_tiny", "deit_small", "vit_base", "simplevit_s"}
