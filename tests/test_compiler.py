"""The compiler: random valid specs build into working modules with the parameter count the spec implies."""

from pathlib import Path

import attrs
import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch import nn

import vspec
from tests.helpers.checks import assert_every_parameter_learns
from tests.helpers.compose import nondegenerate
from tests.helpers.strategies import valid_models
from vspec.compiler import build
from vspec.nn.layers import LayerScale
from vspec.spec import (
    DAFF,
    MHSA,
    MLP,
    SOPE,
    Block,
    ClassTokenHead,
    ConformerHead,
    ConformerStem,
    ConvBranch,
    ConvStem,
    GAPHead,
    HeadTokenBlock,
    IRPEAttention,
    MGCrP,
    Model,
    Norm,
    PatchEmbed,
    RefinerAttention,
    SecondOrderHead,
    SimplePatchEmbed,
    SoTEmbed,
    SvPN,
    T2TEmbed,
    WindowMHSA,
    from_json,
    from_toml,
    load_spec,
    override,
    to_json,
    to_toml,
)

ROOT = Path(__file__).resolve().parents[1]
SPEC_FILES = sorted((ROOT / "specs").glob("*.py"))

torch.set_num_threads(2)


# ---------------------------------------------------------------------------------------------
# the parameter count, computed from the architecture definitions (independent of vspec.nn)


def norm_params(norm: Norm | None, width: int) -> int:
    """LayerNorm / BatchNorm(width): weight + bias (running statistics are buffers); none is the identity."""
    return 2 * width if norm is not None and norm.kind in ("layernorm", "batchnorm") else 0


def linear_params(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + (n_out if bias else 0)


def bottleneck_params(c_in: int, width: int, project: bool) -> int:
    """ResNet's bottleneck: 1x1 (width / 4), 3x3, 1x1 (width), no biases, each + BN; a projected residual 1x1 + BN."""
    mid = width // 4
    return c_in * mid + mid * mid * 9 + mid * width + 2 * (2 * mid + width) + project * (c_in * width + 2 * width)


def conv_branch_params(c: ConvBranch, c_in: int, d: int) -> int:
    """Conformer's ConvTransBlock beside the ViT block: bottleneck, med blocks, FCUDown (1x1 conv with bias,
    LayerNorm), FCUUp (1x1 conv with bias, BN), fusion bottleneck."""
    w, mid = c.width, c.width // 4
    return (bottleneck_params(c_in, w, c_in != w or c.stride != 1) + c.med_blocks * bottleneck_params(w, w, False)
            + (mid * d + d + 2 * d) + (d * mid + mid + 2 * mid) + bottleneck_params(w, w, c.fusion_stride != 1))


def embedder_params(e, in_chans: int, d: int) -> int:
    p = e.patch_size
    if isinstance(e, ConformerStem):  # conv 7x7 (no bias) + BN; the first bottleneck; conv p/4 (bias) to d
        return in_chans * e.stem * 49 + 2 * e.stem + bottleneck_params(e.stem, e.width, True) \
            + linear_params(e.stem * (p // 4) ** 2, d)
    if isinstance(e, PatchEmbed):  # Conv2d(in_chans, d, kernel p, stride p) [+ norm(d)]
        return in_chans * p * p * d + (d if e.bias else 0) + norm_params(e.norm, d)
    if isinstance(e, SoTEmbed):
        return sot_dense_embed_params(e, in_chans, d)
    if isinstance(e, SOPE):  # affines (Eq. 1), k units of 3x3 conv (no bias) + norm (Eq. 2)
        k = e.patch_size.bit_length() - 1
        channels = [in_chans] + [d // 2 ** (k - 1 - i) for i in range(k)]
        total = 2 * in_chans * e.pre_affine + 2 * d * e.post_affine
        return total + sum(c_in * c_out * 9 + norm_params(e.norm, c_out) for c_in, c_out in zip(channels, channels[1:]))
    if isinstance(e, ConvStem):  # conv 7x7 (w), 3x3 (g w), 3x3 (g^2 w), no bias, each + BN; conv p/2 (bias) to d
        w1, w2, w3 = e.width, e.growth * e.width, e.growth * e.growth * e.width
        convs = in_chans * w1 * 49 + w1 * w2 * 9 + w2 * w3 * 9 + linear_params(w3 * (p // 2) ** 2, d)
        return convs + 2 * (w1 + w2 + w3)
    if isinstance(e, T2TEmbed):  # 2 token blocks: LN(in), kqv (qkv: no bias), proj, LN(t), MLP t-t-t; project
        t = e.token_dim
        blocks = sum(2 * w + linear_params(w, 3 * t, e.block == "performer") + linear_params(t, t) + 2 * t
                     + 2 * linear_params(t, t) for w in (in_chans * 49, t * 9))
        return blocks + linear_params(t * 9, d)
    patch_dim = in_chans * p * p  # patchify -> norm(patch_dim) -> Linear(patch_dim, d) -> norm(d)
    return norm_params(e.norm, patch_dim) + linear_params(patch_dim, d) + norm_params(e.norm, d)


def refine_params(r, heads: int) -> int:
    """Refiner's map pipeline: expansion H -> rH (1x1, no bias), DLA (depthwise k x k, or 1 x k + k x 1 for
    row_col), reduction rH -> H; released: the same convolutions (no expansion conv at r = 1) + 4 BNs."""
    wide, k = heads * r.expansion, r.kernel
    if r.form == "released":
        return heads * wide * (r.expansion != 1) + 2 * wide * (r.expansion != 1) + wide * k * k + 2 * wide \
            + wide * heads + 2 * heads + 2 * heads
    dla = wide * k * (2 if r.constraint == "row_col" else k)
    return heads * wide * r.expand + dla + wide * heads * r.reduction


def attention_params(a, d: int, inner: int) -> int:
    """Fused qkv + proj, or (MSF's projections) one matrix per distinct letter of the roles QKV[P]W:
    QUERY, KEY, VALUE, PROBE inner x d / groups (eq14's P~: d x d / groups), WEIGHT d x inner;
    biases per role (qkv_bias: the input roles, proj_bias: WEIGHT)."""
    if isinstance(a, RefinerAttention):  # q, k unless the maps are reused; a value head per map used
        maps = a.heads if a.refine is None or a.refine.reduction else a.heads * a.refine.expansion
        values = maps * inner // a.heads
        refine = refine_params(a.refine, a.heads) if a.refine is not None else 0
        return linear_params(d, 2 * inner * (not a.reuse) + values, a.qkv_bias) + linear_params(values, d) + refine
    if getattr(a, "projections", None) is None:
        return linear_params(d, 3 * inner, a.qkv_bias) + linear_params(inner, d, a.proj_bias)
    roles = "QKVW" if getattr(a, "form", "gauss_orig") == "gauss_orig" else "QKVPW"  # MSF's forms have PROBE
    letters, g = a.projections.roles or roles, a.projections.groups
    rows = {r: (d if r == "P" and getattr(a, "form", None) == "eq14" else inner) for r in roles[:-1]}
    total = sum(d * inner if r == "W" else rows[r] * d // g for r in set(letters))
    return total + sum(rows.values()) * a.qkv_bias + d * a.proj_bias


def block_params(b: Block, d: int, grid: tuple[int, int], prefix: int = 0) -> int:
    a, f = b.attention, b.ffn
    inner = a.heads * (a.head_dim if a.head_dim is not None else d // a.heads)
    total = 2 * norm_params(b.norm, d)  # norm1, norm2
    total += attention_params(a, d, inner)
    if isinstance(a, IRPEAttention):  # a (1 or H, head_dim, buckets) table per place: 7 x 7 + 1 off the grid
        off_grid = prefix > 0 or isinstance(b, HeadTokenBlock)
        total += len(a.on) * (1 if a.shared_head else a.heads) * (inner // a.heads) * ((2 * int(a.beta) + 1) ** 2
                                                                                      + off_grid)
    if isinstance(a, WindowMHSA):  # relative position bias table: (2 wh - 1)(2 ww - 1) offsets x heads
        wh, ww = min(a.window, grid[0]), min(a.window, grid[1])
        total += (2 * wh - 1) * (2 * ww - 1) * a.heads
    hidden = f.hidden if f.hidden is not None else int(d * f.ratio)
    if isinstance(f, DAFF):  # 1x1 conv, spatial (depthwise kxk | pool | none), 1x1 conv (with bias), norms, SE
        total += (d * hidden + hidden) + norm_params(f.norm, hidden) + (hidden * d + d) + norm_params(f.norm, d)
        if f.spatial == "dwconv":
            total += f.kernel ** 2 * hidden + hidden
        if f.spatial != "none":
            total += norm_params(f.norm, hidden)
        if f.cls != "identity":
            r = d // f.se_reduction
            total += linear_params(d, r) + linear_params(r, d)
    else:
        total += linear_params(d, hidden, f.bias) + linear_params(hidden, d, f.bias)
        total += d * (f.layer_scale is not None)  # the output scale
    if isinstance(b, HeadTokenBlock):  # head embedding, Linear(d / h, d), norm(d / h)
        total += a.heads * d + linear_params(d // a.heads, d) + norm_params(b.head_tokens.norm, d // a.heads)
    if b.layer_scale is not None:
        total += 2 * d  # one gamma per branch
    return total


def expected_params(spec: Model, num_classes: int | None = None) -> int:
    nc = spec.num_classes if num_classes is None else num_classes
    p = spec.embedder.patch_size
    h, w = spec.img_size
    grid = (h // p, w // p)
    d = spec.stages[0].dim
    total = embedder_params(spec.embedder, spec.in_chans, d)
    # class token and position embedding
    if spec.class_token:
        total += d
    if spec.pos_embed == "learned":  # one row per token, class token included
        total += (grid[0] * grid[1] + int(spec.class_token)) * d
    # stages: entry (2x2 patch merging: norm(4C) + Linear(4C, D)), then blocks
    chans = getattr(spec.embedder, "width", 0)  # a two-branch body's CNN map (Conformer)
    for stage in spec.stages:
        if stage.entry is not None:
            total += norm_params(stage.entry.norm, 4 * d) + linear_params(4 * d, stage.dim, stage.entry.bias)
            grid = (grid[0] // 2, grid[1] // 2)
        d = stage.dim
        stack = list(stage.block) if isinstance(stage.block, tuple) else [stage.block] * stage.depth
        assert len(stack) == stage.depth
        total += sum(block_params(b, d, grid, int(spec.class_token)) for b in stack)
        for b in stack:
            if "conv" in b.writes:
                total, chans = total + conv_branch_params(b.conv, chans, d), b.conv.width
    # final norm: the last block's norm kind
    if spec.final_norm:
        total += norm_params(spec.stages[-1].blocks[-1].norm, d)
    # head
    head = spec.head
    if isinstance(head, ConformerHead):  # the map's classifier, the tokens' LayerNorm, then the token head
        total += (linear_params(chans, nc) if nc > 0 else 0) + 2 * d
        head = head.tokens
    if isinstance(head, GAPHead):
        total += norm_params(head.norm, d)
    if isinstance(head, ClassTokenHead) and head.dense is not None and nc > 0:  # the classifier on every token
        total += linear_params(d, nc)
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
    rounds of a 6-layer dense block (norm, 1x1 conv to 32, norm, 3x3 conv to 16; the norms BatchNorm, or
    none as under timm 0.3.4) and a transition (BN, 1x1 conv to 128); a final 1x1 conv (bias) to d."""
    assert e.block == "dense"
    total = in_chans * e.stem_dim * 9 + e.stem_dim
    c = e.stem_dim
    for _ in range(3):
        for i in range(6):
            ci = c + 16 * i
            total += norm_params(e.dense_norm, ci) + ci * 32 + norm_params(e.dense_norm, 32) + 32 * 16 * 9
        total += 2 * (c + 96) + (c + 96) * 128
        c = 128
    return total + 128 * d + d


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def n_tokens(spec: Model, after_body: bool = True) -> int:
    """Tokens after the body (the last stage) or before it (the embedder's): each entry halves the grid."""
    p = spec.embedder.patch_size
    merges = sum(s.entry is not None for s in spec.stages) if after_body else 0
    return (spec.img_size[0] // p >> merges) * (spec.img_size[1] // p >> merges) + int(spec.class_token)


def batch(spec: Model, n: int = 2) -> torch.Tensor:
    return vspec.example_input(spec, n)


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


@given(spec=valid_models(), seed=st.integers(0, 2**16))
def test_every_parameter_learns(spec, seed):
    """A nonzero gradient reaches every parameter on a random batch (eval mode: no dropped paths; every
    parameter perturbed, so that near-zero inits such as the class token or a 1e-5 layer scale do not
    shrink a gradient to rounding level)."""
    assume(nondegenerate(spec))
    model = perturbed(spec, seed).double()
    out = model(batch(spec).double())
    (out * torch.randn_like(out)).sum().backward()
    assert_every_parameter_learns(model)


@given(spec=valid_models())
def test_parameter_count_matches_spec(spec):
    torch.manual_seed(0)
    model = build(spec)
    assert n_params(model) == expected_params(spec)
    # position-embedding tables: a learned parameter, or a fixed buffer outside the state dict
    state = model.state_dict()
    first = (1, n_tokens(spec, after_body=False), spec.stages[0].dim)
    if spec.pos_embed == "learned":
        assert isinstance(model.pos_embed, nn.Parameter)
        assert model.pos_embed.shape == first
    elif spec.pos_embed in ("sincos1d", "sincos2d"):
        assert not isinstance(model.pos_embed, nn.Parameter)
        assert model.pos_embed.shape == first
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
    tables = {f"stages.{i}.blocks.{j}.attn.relative_position_bias_table" for i, st_ in enumerate(spec.stages)
              for j, b in enumerate(st_.blocks) if isinstance(b.attention, WindowMHSA)}  # as timm's Swin
    assert nwd - {"pos_embed", "cls_token"} == tables
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
@given(spec=valid_models(), data=st.data())
def test_feature_api(spec, data):
    """timm's feature_info / forward_intermediates: a tap per block of a one-stage model, per stage of a
    hierarchical one, with the widths and strides of the spec, and the taps' values are what the
    blocks compute."""
    torch.manual_seed(0)
    model = build(spec).eval()
    info = model.feature_info
    p = spec.embedder.patch_size
    if len(spec.stages) == 1:
        assert [f["module"] for f in info] == [f"stages.0.blocks.{j}" for j in range(spec.depth)]
        assert all(f["num_chs"] == spec.dim and f["reduction"] == p for f in info)
    else:
        assert [f["module"] for f in info] == [f"stages.{i}" for i in range(len(spec.stages))]
        assert [f["num_chs"] for f in info] == [s.dim for s in spec.stages]
        assert [f["reduction"] for f in info] == [p * 2**i for i in range(len(spec.stages))]
    modules = dict(model.named_modules())
    assert all(f["module"] in modules for f in info)
    # every tap: the output of its module, captured by a hook
    seen = []
    def tap(module, args, out):  # a block returns Carry(x, state): its tokens are the tap
        seen.append(out[0] if isinstance(out, tuple) else out)

    handles = [modules[f["module"]].register_forward_hook(tap) for f in info]
    x = batch(spec)
    with torch.no_grad():
        final, feats = model.forward_intermediates(x, output_fmt="NLC")
        assert torch.equal(final, model.forward_features(x))
    for h in handles:
        h.remove()
    assert len(feats) == len(info) and all(torch.equal(a, b) for a, b in zip(feats, seen[:len(info)]))
    # NCHW maps of the patch tokens, a subset of taps, stopping early
    k = data.draw(st.integers(1, len(info)))
    with torch.no_grad():
        maps = model.forward_intermediates(x, indices=k, intermediates_only=True)
        last = model.forward_intermediates(x, indices=[-1], stop_early=True, intermediates_only=True)
    assert len(maps) == k and torch.equal(last[0], maps[-1])
    gh, gw = spec.img_size[0] // p, spec.img_size[1] // p
    for f, m in zip(info[len(info) - k:], maps):
        assert m.shape == (2, f["num_chs"], gh * p // f["reduction"], gw * p // f["reduction"])
    with pytest.raises(ValueError, match="indices"):
        model.forward_intermediates(x, indices=len(info) + 1)


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
    out = model(vspec.example_input(spec, 2, device="meta"))
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
    """LayerNorm over the last axis, or eval-mode BatchNorm over it (running statistics), or nothing."""
    if norm is None or norm.kind == "none":
        return x
    if norm.kind == "batchnorm":
        bn = layer.bn
        return (x - bn.running_mean) / torch.sqrt(bn.running_var + norm.eps) * bn.weight + bn.bias
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * layer.weight + layer.bias


def ref_mlp(ffn: nn.Module, act: str, x: torch.Tensor) -> torch.Tensor:
    y = ref_linear(ffn.fc2, REF_ACTS[act](ref_linear(ffn.fc1, x)))
    return y * ffn.ls.gamma if isinstance(ffn.ls, LayerScale) else y


def ref_grouped(m: nn.Module, groups: int, grouping: str) -> torch.Tensor:
    """A grouped role matrix (out, in / G) as its dense (out, in) weight: output o reads input group
    o mod G (interleaved) or o // (out / G) (block), zeros elsewhere (MSF Sec. 2.3)."""
    out, width = m.weight.shape
    dense = m.weight.new_zeros(out, width * groups)
    for o in range(out):
        g = o % groups if grouping == "interleaved" else o // (out // groups)
        dense[o, g * width:(g + 1) * width] = m.weight[o]
    return dense


def ref_qkv(attn: nn.Module, a, x: torch.Tensor) -> torch.Tensor:
    """[q, k, v] along the channels: the fused qkv, or each role's (tied: shared) matrix and its own bias."""
    if a.projections is None:
        return ref_linear(attn.qkv, x)
    p, roles = attn.projections, a.projections.roles or "QKVW"
    out = torch.cat([x @ ref_grouped(p.matrices[r], a.projections.groups, a.projections.grouping).t()
                     for r in roles[:3]], dim=-1)
    return out if p.in_bias is None else out + p.in_bias


def ref_out(attn: nn.Module, a, z: torch.Tensor) -> torch.Tensor:
    """The output projection: `proj`, WEIGHT's own matrix, or the transpose of the role WEIGHT is tied to."""
    if a.projections is None:
        return ref_linear(attn.proj, z)
    p, letter = attn.projections, (a.projections.roles or "QKVW")[3]
    w = p.matrices["W"].weight if letter == "W" else \
        ref_grouped(p.matrices[letter], a.projections.groups, a.projections.grouping).t()
    y = z @ w.t()
    return y if p.out_bias is None else y + p.out_bias


def ref_softmax_attention(q, k, v, scale, bias=0.0):
    return torch.softmax(q @ k.transpose(-1, -2) * scale + bias, dim=-1) @ v


def ref_window_attention(attn: nn.Module, a: WindowMHSA, t: torch.Tensor, grid, index_in_stage: int):
    """Swin Sec. 3.2 written out: roll the grid by -window // 2 in odd blocks of a stage (axes longer than
    the window), attend inside each window with B[h, i, j] = table[(dy + wh - 1)(2 ww - 1) + dx + ww - 1]
    and -100 between tokens from different regions of the rolled grid, roll back, project."""
    b, _, c = t.shape
    (gh, gw), hd = grid, (a.head_dim or c // a.heads)
    wh, ww = min(a.window, gh), min(a.window, gw)
    odd = a.shift and index_in_stage % 2 == 1
    sh, sw = (a.window // 2 if odd and g > a.window else 0 for g in grid)
    x = ref_qkv(attn, a, t).reshape(b, gh, gw, -1).roll((-sh, -sw), (1, 2))
    out = torch.zeros(b, gh, gw, a.heads * hd, dtype=t.dtype)

    def region(i, size, window, shift):
        return 0 if not shift or i < size - window else (1 if i < size - shift else 2)

    pos = [(i, j) for i in range(wh) for j in range(ww)]
    bias_index = torch.tensor([[(pi - qi + wh - 1) * (2 * ww - 1) + (pj - qj + ww - 1) for qi, qj in pos]
                               for pi, pj in pos])
    bias = attn.relative_position_bias_table[bias_index].permute(2, 0, 1)  # (heads, n, n)
    for r0 in range(0, gh, wh):
        for c0 in range(0, gw, ww):
            labels = torch.tensor([[region(r0 + i, gh, wh, sh), region(c0 + j, gw, ww, sw)] for i, j in pos])
            mask = (labels[:, None] != labels[None, :]).any(-1) * -100.0
            q, k, v = x[:, r0:r0 + wh, c0:c0 + ww].reshape(b, wh * ww, 3, a.heads, hd).permute(2, 0, 3, 1, 4)
            scale = a.scale if a.scale is not None else hd**-0.5
            o = ref_softmax_attention(q, k, v, scale, bias + mask)
            out[:, r0:r0 + wh, c0:c0 + ww] = o.transpose(1, 2).reshape(b, wh, ww, -1)
    return ref_out(attn, a, out.roll((sh, sw), (1, 2)).reshape(b, gh * gw, -1))


def ref_patch_merging(entry: nn.Module, spec, t: torch.Tensor, grid) -> torch.Tensor:
    """Swin's 2x2 merge: [x(2i, 2j), x(2i+1, 2j), x(2i, 2j+1), x(2i+1, 2j+1)] -> norm -> Linear."""
    b, _, c = t.shape
    x = t.reshape(b, grid[0], grid[1], c)
    x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], dim=-1)
    return ref_linear(entry.reduction, ref_norm(entry.norm, spec.norm, x.reshape(b, -1, 4 * c)))


def reference_forward(model: nn.Module, spec: Model, x: torch.Tensor) -> torch.Tensor:
    """The architecture as documented in the spec classes, in eval mode."""
    b, c, h, w = x.shape
    p, d = spec.embedder.patch_size, spec.stages[0].dim
    grid = (h // p, w // p)
    # patches in raster order, each flattened as (p1 p2 c)
    patches = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).reshape(b, -1, p * p * c)
    emb = model.embedder
    if isinstance(spec.embedder, PatchEmbed):  # the p x p stride-p convolution as a matmul, then the norm
        weight = emb.proj.weight.permute(0, 2, 3, 1).reshape(d, -1)
        t = ref_norm(emb.norm, spec.embedder.norm, patches @ weight.t() + (emb.proj.bias if spec.embedder.bias else 0))
    else:
        t = ref_norm(emb.norm_in, spec.embedder.norm, patches)
        t = ref_norm(emb.norm_out, spec.embedder.norm, ref_linear(emb.proj, t))
    if spec.class_token:
        t = torch.cat((model.cls_token.expand(b, 1, d), t), dim=1)
    if spec.pos_embed != "none":
        t = t + model.pos_embed
    for stage, stage_spec in zip(model.stages, spec.stages):
        if stage_spec.entry is not None:
            t = ref_patch_merging(stage.entry, stage_spec.entry, t, grid)
            grid = (grid[0] // 2, grid[1] // 2)
        d, n = stage_spec.dim, t.shape[1]
        for j, (blk, bs) in enumerate(zip(stage.blocks, stage_spec.blocks)):
            a = bs.attention
            hd = a.head_dim if a.head_dim is not None else d // a.heads
            u = ref_norm(blk.norm1, bs.norm, t)
            if isinstance(a, WindowMHSA):
                o = ref_window_attention(blk.attn, a, u, grid, j)
            else:
                q, k, v = ref_qkv(blk.attn, a, u).reshape(b, n, 3, a.heads, hd).permute(2, 0, 3, 1, 4)
                o = ref_softmax_attention(q, k, v, a.scale if a.scale is not None else hd**-0.5)
                o = ref_out(blk.attn, a, o.transpose(1, 2).reshape(b, n, a.heads * hd))
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
    rates = [getattr(b.drop_path, "p", 0.0) for b in model.stages[0].blocks]
    assert rates == pytest.approx([0.0, 0.1, 0.2])
    torch.manual_seed(0)
    model.train()
    x = batch(model.spec, 8)
    assert not torch.equal(model(x), model(x))  # stochastic in training
    model.eval()
    assert torch.equal(model(x), model(x))


def test_drop_path_ramps_over_all_blocks_of_all_stages():
    """One linear ramp from 0 to drop_path over the blocks of every stage, in order (timm's Swin)."""
    spec = override(load_spec(ROOT / "specs/swin_tiny.py"), {"drop_path": 0.3})
    model = build(spec, device="meta")
    rates = [getattr(b.drop_path, "p", 0.0) for stage in model.stages for b in stage.blocks]
    assert rates == pytest.approx([0.3 * i / 11 for i in range(12)])


def test_swin_shift_alternates_within_a_stage_and_stops_where_the_grid_fits_one_window():
    """Swin-T at 224 px: odd blocks of stages 1-3 shift by 3; stage 4's 7 x 7 grid is one window and no
    block of it shifts (Swin's rule); a window larger than the grid is clamped to it."""
    model = build(load_spec(ROOT / "specs/swin_tiny.py"), device="meta")
    shifted = [[b.attn.shift_mask is not None for b in stage.blocks] for stage in model.stages]
    assert shifted == [[False, True], [False, True], [False, True] * 3, [False, False]]
    assert [stage.blocks[0].attn.window for stage in model.stages] == [(7, 7)] * 4
    wide = build(override(load_spec(ROOT / "specs/swin_tiny.py"), {"stages.3.block.attention.window": 12}),
                 device="meta")
    assert wide.stages[3].blocks[0].attn.window == (7, 7)
    assert wide.stages[3].blocks[0].attn.relative_position_bias_table.shape == (13 * 13, 24)


def test_timm_init_vs_torch_init():
    torch.manual_seed(0)
    timm_init = build(tiny(init="timm"))
    torch.manual_seed(0)
    torch_init = build(tiny(init="torch"))
    for (name, p), (_, q) in zip(timm_init.named_parameters(), torch_init.named_parameters()):
        assert p.shape == q.shape, name
    fc1 = timm_init.stages[0].blocks[0].ffn.fc1
    assert torch.count_nonzero(fc1.bias) == 0  # timm: zero Linear biases
    assert 0.015 < fc1.weight.std().item() < 0.025  # trunc-normal(std 0.02)
    assert timm_init.cls_token.abs().max() < 1e-4  # normal(1e-6)
    assert torch.count_nonzero(torch_init.stages[0].blocks[0].ffn.fc1.bias) > 0  # PyTorch default: uniform biases


def test_components_follow_the_spec():
    spec = tiny(block=(Block(attention=MHSA(heads=2, head_dim=8, qkv_bias=False), ffn=MLP(hidden=24, act="relu"),
                             layer_scale=0.5),
                       Block(attention=MHSA(heads=4), ffn=MLP(ratio=2.0, bias=False, act="silu"),
                             norm=Norm(kind="none")),
                       Block(attention=MHSA(heads=1, scale=0.5), ffn=MLP(act="gelu_tanh"), norm=Norm(eps=1e-3))),
                head=GAPHead(norm=Norm(eps=1e-4)), class_token=False, final_norm=True)
    torch.manual_seed(0)
    model = build(spec)
    b0, b1, b2 = model.stages[0].blocks
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
    for blk, act in zip(model.stages[0].blocks, ("relu", "silu", "gelu_tanh")):
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


# the base-size and larger presets (80 M+ parameters: ViT-B, Swin-B, BERT / RoBERTa / GPT base and up, and their
# variants): `make test-slow`; every family's smaller presets stay in `make test`
SLOW_PRESETS = {"refined_vit_l", "refined_vit_l_dense", "refined_vit_m_dense", "swin_base", "bert_large",
                "refined_vit_m", "gpt2", "gpt", "bert_base_sot_cola", "bert_base", "msf_vit_b", "msf_vit_b_g2",
                "gpt_sot", "roberta_base", "simplevit_b", "swin_base_sot", "sot_base", "vit_base",
                "roberta_large", "gpt2_medium", "bert_large_sot", "roberta_large_sot",
                # the other SoT language presets: the bodies above with the head of bert_base_sot_cola / gpt_sot
                "bert_base_sot_rte", "bert_base_sot_mnli", "bert_base_sot_qnli", "spanbert_base_sot",
                "roberta_base_sot",
                # T2T-ViT-14 / 24 and their variants (T2T-ViT-7 / 12 and t2t_vit_12_sot stay in make test)
                "t2t_vit_14", "t2t_vit_24", "t2t_vit_t_14", "t2t_vit_t_24", "t2t_vit_14_sot", "t2t_vit_24_sot",
                # LV-ViT-S / M / L at every resolution (LV-ViT-T stays in make test; tests/models/lvvit counts them
                # all on the meta device)
                "lvvit_s", "lvvit_s_384", "lvvit_m", "lvvit_m_384", "lvvit_m_448", "lvvit_l", "lvvit_l_448",
                "lvvit_l_512"}


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW_PRESETS else p
                                  for p in SPEC_FILES], ids=[p.stem for p in SPEC_FILES])
def test_preset_specs(path):
    """Every preset round-trips, has the parameter count its spec implies (a language body's: Hugging Face's,
    tests/convert/test_hf.py), and a backward pass on a random batch gives every parameter a finite, nonzero gradient
    (eval mode: nothing stochastic hides one); in training, `model(x)` is the logits tensor too (timm's convention:
    MixToken and the heads' several outputs only on request) and draws nothing from numpy's global state."""
    spec = load_spec(path)
    assert from_json(to_json(spec)) == spec
    assert from_toml(to_toml(spec)) == spec
    torch.manual_seed(0)
    model = build(spec).eval()
    if not spec.embedder.text and (not isinstance(spec.embedder, SoTEmbed) or spec.embedder.block == "dense"):
        assert n_params(model) == expected_params(spec)
    out = model(batch(spec))
    assert out.shape == (2, spec.num_classes)
    assert torch.isfinite(out).all()
    with torch.no_grad():  # layer scales at 1: a 1e-5 init (Refined-ViT's MLPs) would shrink gradients to rounding
        for m in model.modules():
            if isinstance(m, LayerScale):
                m.gamma.fill_(1.0)
        if spec.embedder.writes:  # BatchNorm statistics of the batch: with the init's (0, 1) a 12-block ResNet
            calibrate_batch_norms(model, batch(spec))  # branch's logits reach 2e3, and float32 rounds small gradients
    out = model(batch(spec))
    (out * torch.randn_like(out)).sum().backward()
    assert_every_parameter_learns(model, inert=inert_parameters(spec))
    numpy_state = np.random.get_state()
    with torch.no_grad():
        out = model.train()(batch(spec))
    assert isinstance(out, torch.Tensor) and out.shape == (2, spec.num_classes)
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), numpy_state))


def inert_parameters(spec: Model) -> tuple[str, ...]:
    """iRPE on keys under a class-token head: the last block's key table only shifts the class token's logits
    by a constant (one bucket for every key), which softmax removes (the iRPE fixtures' README)."""
    i, stage = len(spec.stages) - 1, spec.stages[-1]
    last = stage.blocks[-1].attention
    if isinstance(last, IRPEAttention) and "k" in last.on and isinstance(spec.head, ClassTokenHead) \
            and spec.head.dense is None:
        return (f"stages.{i}.blocks.{stage.depth - 1}.attn.core.table_k",)
    return ()


def calibrate_batch_norms(model: nn.Module, x: torch.Tensor) -> None:
    """Running statistics = those of `x` (one training-mode pass with a cumulative average), then eval mode."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()(x)
    for m in norms:
        m.momentum = 0.1
    model.eval()


def test_input_of_another_size_is_a_one_line_error():
    """A model is built for its spec's image size (position tables, DAFF's grid, Swin's windows)."""
    model = build(tiny())
    with pytest.raises(ValueError, match=r"^input of shape \(1, 3, 32, 32\): this model was built for \(B, 3, 16, "
                                         r"32\) .*img_size") as info:
        model(torch.randn(1, 3, 32, 32))
    assert "\n" not in str(info.value)


def test_presets_exist():
    assert {p.stem for p in SPEC_FILES} >= {"deit_tiny", "deit_small", "vit_base", "simplevit_s", "swin_tiny",
                                            "swin_small", "swin_base"}
