"""MSF (Kobayashi, "Mean-shift feature transformer"): the identities behind mean-shift attention (float64
references written from the paper's equations), projection tying and grouping, every parameter count of
Tables 1, 2, 4 and 6, and the released checkpoints."""

import contextlib
from pathlib import Path

import attrs
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

import vspec
import vspec.models.msf.convert
from tests.helpers.checks import FIXTURES, argument_cases, assert_close_to_stored, check_argument
from tests.helpers.strategies import TABLE1, TABLE2
from vspec.compiler import build_component, context
from vspec.convert import ConversionError, from_official
from vspec.models.msf.ops import gaussian_attention
from vspec.ops import grouped_linear, structured
from vspec.spec import (
    MHSA,
    Block,
    MeanShiftAttention,
    Model,
    PatchEmbed,
    Projections,
    SpecError,
    WindowMeanShiftAttention,
)

ROOT = Path(__file__).resolve().parents[3]
F64 = torch.float64


def attention_module(attention, dim: int):
    """The module of one attention spec at width `dim` (float64)."""
    spec = Model(embedder=PatchEmbed(patch_size=4), block=Block(attention=attention), depth=1, dim=dim,
                 num_classes=3, img_size=16)
    torch.manual_seed(0)
    return build_component(attention, context(spec)).double()


# ---------------------------------------------------------------- the Gaussian kernel (footnote 2)
@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 9), m=st.integers(1, 9), d=st.integers(1, 8), seed=st.integers(0, 2**16),
       offset=st.floats(-50, 50), scale=st.floats(0.05, 2.0))
def test_gaussian_softmax_is_a_dot_product_softmax_with_a_per_key_bias(n, m, d, seed, offset, scale):
    """softmax_i(-1/2 |k_i - q|^2 s) v, written out, equals vspec's fused construction (q.k_i - 1/2 |k_i|^2)
    and the dot-product softmax with a per-key float mask, for any query; shifting queries and keys
    by one offset changes nothing (the kernel sees differences only)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, rows, d, generator=g, dtype=F64) for rows in (n, m, m))
    dist = (q[..., :, None, :] - k[..., None, :, :]).square().sum(-1)  # |q - k_i|^2, (.., n, m)
    expected = (-0.5 * dist * scale).softmax(-1) @ v
    bias = (-0.5 * k.square().sum(-1) * scale)[..., None, :]
    masked = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    torch.testing.assert_close(gaussian_attention(q, k, v, scale), expected)
    torch.testing.assert_close(masked, expected)
    torch.testing.assert_close(gaussian_attention(q + offset, k + offset, v, scale), expected, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("path", ["cpu_flash", "sdpa"])
def test_gaussian_attention_keeps_no_map_for_backward(path):
    """What autograd saves for the backward of the fused construction grows with n, not n^2: on the eager
    CPU path (the kernel called directly) and on SDPA under autograd (here: under a dispatch mode)."""
    saved = []
    q, k, v = (torch.randn(1, 1, 256, 8, requires_grad=True) for _ in range(3))
    mode = FlopCounterMode(display=False) if path == "sdpa" else contextlib.nullcontext()
    with mode, torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        out = gaussian_attention(q, k, v)
        assert ("CpuFlashGaussian" in type(out.grad_fn).__name__) == (path == "cpu_flash")
        out.sum().backward()
    assert max(saved) < 256 * 256 / 4


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 2), h=st.integers(1, 3), n=st.integers(1, 40), m=st.integers(1, 40), d=st.integers(1, 9),
       seed=st.integers(0, 2**16), strided=st.booleans(), scale=st.floats(0.05, 2.0))
def test_cpu_flash_path_equals_the_gaussian_kernel_forward_and_backward(b, h, n, m, d, seed, strided, scale):
    """The eager CPU path (flash kernel called directly, hand-written backward) against softmax_i(-1/2
    |k_i - q|^2 s) v written out in float64: outputs and the gradients of q, k, v, for contiguous inputs
    and for the (b, n, h, d) views that a projection's rearrange hands over, queries and keys of
    different lengths."""
    g = torch.Generator().manual_seed(seed)

    def leaf(rows):
        t = torch.randn(b, rows, h, d, generator=g, dtype=F64).transpose(1, 2)
        return (t if strided else t.contiguous()).requires_grad_()

    q, k, v = leaf(n), leaf(m), leaf(m)
    grad = torch.randn(b, h, n, d, generator=g, dtype=F64)
    out = gaussian_attention(q, k, v, scale)
    assert "CpuFlashGaussian" in type(out.grad_fn).__name__
    got = [out, *torch.autograd.grad(out, (q, k, v), grad)]
    dist = (q[..., :, None, :] - k[..., None, :, :]).square().sum(-1)
    expected = (-0.5 * dist * scale).softmax(-1) @ v
    want = [expected, *torch.autograd.grad(expected, (q, k, v), grad)]
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::FutureWarning")
def test_gaussian_attention_steps_off_the_cpu_flash_path_where_it_must():
    """Dropout, autocast, tracing (fvcore) and dispatch modes (FlopCounterMode) run SDPA on q', k', v' under
    autograd, and the two paths agree in float32."""
    q, k, v = (torch.randn(2, 3, 17, 8, requires_grad=True) for _ in range(3))

    def node(*args):
        return type(gaussian_attention(q, k, v, *args).grad_fn).__name__

    assert "CpuFlashGaussian" in node()
    assert "CpuFlashGaussian" not in node(None, 0.5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert "CpuFlashGaussian" not in node()
    traced = torch.jit.trace(lambda q, k, v: gaussian_attention(q, k, v), (q, k, v))
    assert "scaled_dot_product_attention" in str(traced.graph)
    with torch.no_grad():
        fast = gaussian_attention(q, k, v)
    with FlopCounterMode(display=False):
        plain = gaussian_attention(q, k, v)
    torch.testing.assert_close(fast, plain)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 8), d=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_identity_projections_make_the_block_a_mean_shift(n, d, seed):
    """Q = K = V = P = W = I (one head, "QQQQQ" with Q = I): the attention update of every token x is the
    mean-shift vector m(x) - x of Eq. 11 on the tokens' Gaussian KDE p(x) = sum_i exp(-|x - x_i|^2 / 2h^2),
    with h^2 = 1 / scale = sqrt(d) (the d_head^-1/2 scaling); m(x) - x = h^2 grad log p(x)."""
    attn = attention_module(MeanShiftAttention(heads=1, qkv_bias=False, proj_bias=False,
                                               projections=Projections(roles="QQQQQ")), d)
    with torch.no_grad():
        attn.projections.matrices["Q"].weight.copy_(torch.eye(d))
    x = torch.randn(1, n, d, generator=torch.Generator().manual_seed(seed), dtype=F64)
    h2 = d**0.5
    kernel = torch.exp(-(x[0, :, None] - x[0, None]).square().sum(-1) / (2 * h2))  # (query, token)
    shift = kernel @ x[0] / kernel.sum(-1, keepdim=True) - x[0]  # m(x) - x
    torch.testing.assert_close(attn(x)[0], shift)
    probe = x[0].clone().requires_grad_()
    log_p = torch.logsumexp(-(probe[:, None] - x[0, None]).square().sum(-1) / (2 * h2), dim=-1)
    (grad,) = torch.autograd.grad(log_p.sum(), probe)
    torch.testing.assert_close(h2 * grad, shift)


@settings(max_examples=10, deadline=None)
@given(heads=st.integers(1, 3), head_dim=st.integers(1, 4), dim=st.integers(2, 8), seed=st.integers(0, 2**16))
def test_eq14_is_eq12_with_the_reparameterised_probe(heads, head_dim, dim, seed):
    """Eq. 14 with P~ = sum_h W_h P_h^T (a d x d matrix) computes Eq. 12."""
    common = dict(heads=heads, head_dim=head_dim, qkv_bias=False, proj_bias=False)
    eq12 = attention_module(MeanShiftAttention(**common), dim)
    eq14 = attention_module(MeanShiftAttention(**common, form="eq14"), dim)
    m12, m14 = eq12.projections.matrices, eq14.projections.matrices
    p_tilde = torch.zeros(dim, dim, dtype=F64)
    for h in range(heads):  # W_h: d x d_head (columns of WEIGHT), P_h^T: d_head x d (rows of PROBE)
        rows = slice(h * head_dim, (h + 1) * head_dim)
        p_tilde += m12["W"].weight[:, rows] @ m12["P"].weight[rows]
    with torch.no_grad():
        for letter in "QKVW":
            m14[letter].weight.copy_(m12[letter].weight)
        m14["P"].weight.copy_(p_tilde)
    x = torch.randn(2, 5, dim, generator=torch.Generator().manual_seed(seed), dtype=F64)
    torch.testing.assert_close(eq14(x), eq12(x))


@settings(max_examples=10, deadline=None)
@given(form=st.sampled_from(["eq12", "eq14", "gauss_orig"]), heads=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_one_window_over_the_whole_grid_is_global_mean_shift_attention(form, heads, seed):
    """WindowMeanShiftAttention with one unshifted window covering the grid and a zero relative position
    bias computes MeanShiftAttention with the same projections."""
    common = dict(heads=heads, head_dim=3, form=form, projections=Projections(groups=1))
    spec = Model(embedder=PatchEmbed(patch_size=4), block=Block(attention=WindowMeanShiftAttention(**common, window=4)),
                 depth=1, dim=8, num_classes=3, img_size=16, class_token=False, head=vspec.spec.GAPHead())
    torch.manual_seed(seed)
    window = build_component(spec.block.attention, context(spec)).double()
    plain = attention_module(MeanShiftAttention(**common), 8)
    with torch.no_grad():
        plain.load_state_dict(window.state_dict(), strict=False)
        window.relative_position_bias_table.zero_()
    x = torch.randn(2, 16, 8, dtype=F64)
    torch.testing.assert_close(window(x), plain(x))


# ---------------------------------------------------------------- grouping (Sec. 2.3)
@settings(max_examples=40, deadline=None)
@given(groups=st.integers(1, 4), width=st.integers(1, 4), rows=st.integers(1, 4),
       grouping=st.sampled_from(["interleaved", "block"]), seed=st.integers(0, 2**16))
def test_grouped_projection_is_a_dense_layer_with_the_structured_matrix(groups, width, rows, grouping, seed):
    """interleaved: output channel o reads input group o mod G; block: output block j (of out / G channels)
    reads group j. Both equal a dense layer whose weight is zero outside each output's group."""
    g = torch.Generator().manual_seed(seed)
    out = rows * groups
    w = torch.randn(out, width, generator=g, dtype=F64)
    dense = torch.zeros(out, groups * width, dtype=F64)
    for o in range(out):
        group = o % groups if grouping == "interleaved" else o // rows
        dense[o, group * width:(group + 1) * width] = w[o]
    x = torch.randn(3, 2, groups * width, generator=g, dtype=F64)
    torch.testing.assert_close(grouped_linear(x, w, groups, grouping), x @ dense.T)
    torch.testing.assert_close(structured(w, groups, grouping), dense)


# ---------------------------------------------------------------- tying (Tables 1, 2)
@settings(max_examples=15, deadline=None)
@given(row=st.sampled_from(TABLE1 + TABLE2), groups=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_a_tied_roles_gradient_is_the_sum_of_its_uses(row, groups, seed):
    """A tied model equals the untied one whose roles hold copies of the shared matrices (WEIGHT tied to
    a role: the transpose, densified), and a shared matrix's gradient is the sum of its roles' gradients."""
    names = "QKVPW" if len(row) == 5 else "QKVW"
    kind = MeanShiftAttention if len(row) == 5 else MHSA
    common = dict(heads=2, head_dim=4, qkv_bias=False, proj_bias=False)
    tied = attention_module(kind(**common, projections=Projections(roles=row, groups=groups)), 8)
    free = attention_module(kind(**common, projections=Projections(groups=groups)), 8)
    shared, untied = tied.projections.matrices, free.projections.matrices
    with torch.no_grad():
        for name, letter in zip(names, row):
            source = shared[letter]
            untied[name].weight.copy_(source.dense().T if name == "W" and letter != "W" else source.weight)
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(seed), dtype=F64)
    grad = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(seed + 1), dtype=F64)
    y_tied, y_free = tied(x), free(x)
    torch.testing.assert_close(y_tied, y_free)
    (y_tied * grad).sum().backward()
    (y_free * grad).sum().backward()
    for letter, matrix in shared.items():
        total = torch.zeros_like(matrix.weight)
        for name, used in zip(names, row):
            if used != letter:
                continue
            g = untied[name].weight.grad
            if name == "W" and letter != "W":  # W = dense(M)^T: keep the entries that the grouped M stores
                g = structured_grad(g.T, matrix)
            total += g
        torch.testing.assert_close(matrix.weight.grad, total)


def structured_grad(dense_grad, matrix):
    """The gradient of a grouped weight from that of its dense (out, in) matrix: each stored entry's."""
    out, width = matrix.weight.shape
    rows = torch.arange(out)
    group = rows % matrix.groups if matrix.grouping == "interleaved" else rows // (out // matrix.groups)
    cols = group[:, None] * width + torch.arange(width)[None, :]
    return dense_grad.gather(1, cols)


def test_untied_projections_compute_the_fused_attention():
    """MHSA with Projections() (QKVW, one matrix each) is the fused-qkv MHSA with its weight split."""
    common = dict(heads=2, qkv_bias=True, proj_bias=True)
    fused = attention_module(MHSA(**common), 8)
    split = attention_module(MHSA(**common, projections=Projections()), 8)
    m = split.projections.matrices
    with torch.no_grad():
        for letter, w in zip("QKV", fused.qkv.weight.chunk(3)):
            m[letter].weight.copy_(w)
        split.projections.in_bias.copy_(fused.qkv.bias)
        m["W"].weight.copy_(fused.proj.weight)
        split.projections.out_bias.copy_(fused.proj.bias)
    x = torch.randn(2, 5, 8, dtype=F64)
    torch.testing.assert_close(split(x), fused(x))


@pytest.mark.parametrize("changes,path,needle", [
    (dict(projections=Projections(roles="QKVW")), "projections.roles", "has 5 roles"),
    (dict(form="gauss_orig", projections=Projections(roles="QKVPW")), "projections.roles", "has 4 roles"),
    (dict(form="eq14", projections=Projections(roles="QKVPP")), "projections.roles", "P~"),
    (dict(projections=Projections(groups=3)), "projections.groups", "does not divide"),
])
def test_projections_that_do_not_fit_their_attention_name_the_field(changes, path, needle):
    with pytest.raises(SpecError, match=needle) as info:
        Model(block=Block(attention=MeanShiftAttention(heads=2, **changes)), dim=16, depth=1, img_size=32,
              embedder=PatchEmbed(patch_size=16))
    assert info.value.path == f"block.attention.{path}"


@pytest.mark.parametrize("roles,needle", [("KKVPW", "QUERY"), ("QPVPW", "KEY"), ("QKVXW", "PROBE"), ("QKV", "spells")])
def test_malformed_roles_are_one_error_on_the_field(roles, needle):
    with pytest.raises(SpecError, match=needle) as info:
        Projections(roles=roles)
    assert info.value.path == "Projections.roles"


# ---------------------------------------------------------------- the paper's counts
SIMPLEVIT_S = vspec.load_spec(ROOT / "specs" / "simplevit_s.py")
# weight-matrix parameters (M) of SimpleViT-S by the number of distinct projection matrices (Tables 1, 2)
BY_MATRICES = {1: 16.60, 2: 18.37, 3: 20.14, 4: 21.91, 5: 23.68}


def with_attention(spec: Model, attention) -> Model:
    return attrs.evolve(spec, block=attrs.evolve(spec.block, attention=attention))


def weights_m(spec: Model) -> float:
    return vspec.profile(spec, meta=True).params_weights / 1e6


@pytest.mark.parametrize("row", TABLE1 + TABLE2)
def test_every_tying_row_has_its_tables_parameter_count(row):
    """Tables 1 (MSF) and 2 (original) on SimpleViT-S: each row's count, by how many matrices it keeps."""
    kind = MeanShiftAttention if len(row) == 5 else MHSA
    attention = kind(heads=6, head_dim=64, qkv_bias=False, proj_bias=False, projections=Projections(roles=row))
    assert round(weights_m(with_attention(SIMPLEVIT_S, attention)), 2) == BY_MATRICES[len(set(row))]


@pytest.mark.parametrize("kind,roles,expected", [
    (MeanShiftAttention, None, 20.14), (MeanShiftAttention, "QKKKW", 18.37), (MHSA, None, 19.26)])
def test_table4_grouped_counts(kind, roles, expected):
    """Table 4: 2-group interleaved projections on MSF, on Table 1h and on the original attention."""
    attention = kind(heads=6, head_dim=64, qkv_bias=False, proj_bias=False, projections=Projections(roles, groups=2))
    assert round(weights_m(with_attention(SIMPLEVIT_S, attention)), 2) == expected


# Table 6: weight-matrix params (M) / FLOPs = 2 x MACs (G; linear layers and attention matmuls, norms not
# counted: with them the 2-group Ti reads 2.336, 0.7% high), orig / msf / msf 2-group
TABLE6 = {"ti": ((5.65, 2.50), (6.09, 2.67), (5.20, 2.32)), "ss": ((11.30, 4.64), (12.18, 4.98), (10.41, 4.29)),
          "s": ((21.91, 9.16), (23.68, 9.85), (20.14, 8.46)), "b": ((86.29, 34.96), (93.37, 37.73), (79.21, 32.18))}
PRESETS = [(f"{stem}{size}{suffix}", TABLE6[size][i]) for size in TABLE6
           for i, (stem, suffix) in enumerate((("simplevit_", ""), ("msf_vit_", ""), ("msf_vit_", "_g2")))]
SWIN6 = {"tiny": ((28.20, 8.99), (30.36, 9.68), (26.04, 8.29)),
         "small": ((49.43, 17.49), (53.36, 18.88), (45.51, 16.10))}
PRESETS += [(f"{stem}{size}{suffix}", SWIN6[size][i]) for size in SWIN6
            for i, (stem, suffix) in enumerate((("swin_", ""), ("msf_swin_", ""), ("msf_swin_", "_g2")))]


@pytest.mark.parametrize("name,figures", PRESETS, ids=[p[0] for p in PRESETS])
def test_every_table6_preset_matches_its_row(name, figures):
    prof = vspec.profile(vspec.load_spec(ROOT / "specs" / f"{name}.py"), meta=True)
    params, flops = figures
    assert abs(prof.params_weights / 1e6 - params) <= 0.005 * params
    assert abs(2 * prof.conventions["no_norms"] / 1e9 - flops) <= 0.005 * flops


def test_the_projections_macs_sit_in_linear_layers():
    """SoT's conv_linear convention finds every projection of a grouped MSF model (WEIGHT included): on
    SimpleViT all MACs but the attention core's and the norms' are linear layers'."""
    prof = vspec.profile(vspec.load_spec(ROOT / "specs" / "msf_vit_ti_g2.py"), meta=True)
    norms = prof.macs - prof.conventions["no_norms"]
    attention = prof.macs - prof.conventions["no_attention_matmuls"]
    assert prof.conventions["conv_linear"] == prof.macs - norms - attention


# ---------------------------------------------------------------- released checkpoints
@pytest.mark.parametrize("name", ["msf_orig", "msf_msf", "msf_msf-g2", "msf_orig-g2"])
def test_released_checkpoints_reproduced(name):
    data = torch.load(FIXTURES / f"{name}.pt", weights_only=True)
    model = from_official("msf", data["state_dict"], data["config"]).eval()
    with torch.no_grad():
        assert_close_to_stored(model(data["x"]), data["y"])


def test_an_unknown_released_attention_is_one_line():
    data = torch.load(FIXTURES / "msf_orig.pt", weights_only=True)
    with pytest.raises(ConversionError, match="att must be 'orig' or 'msf'") as info:
        from_official("msf", data["state_dict"], {**data["config"], "att": "msf-gx"})
    assert "\n" not in str(info.value)



# SimpleViTflexAtt.__init__'s arguments (tk1980/MSFtransformer @ ce23d1f, vit_pytorch/simple_vit_flexatt.py)
MSF_CONSTRUCTOR = ("image_size", "patch_size", "num_classes", "dim", "depth", "heads", "mlp_dim", "channels",
                   "dim_head", "att")


def msf_fixture():
    return torch.load(FIXTURES / "msf_msf.pt", weights_only=True)  # 64 px, patch 16, dim 64, 2 heads of 32


def as_msf(spec):
    return spec == vspec.models.msf.convert.MSF.spec_of(msf_fixture()["config"])


# argument -> [(changes to msf_msf's config, the converted spec's expected property or the refusal's text)]
MSF_CASES = {
    "image_size": [({"image_size": (64, 32)}, lambda s: s.img_size == (64, 32) and s.grid == (4, 2)),
                   ({"image_size": "64"}, r"image_size '64': an int or a \(height, width\) pair")],
    "patch_size": [({"patch_size": 8}, lambda s: s.embedder.patch_size == 8), ({"patch_size": (16, 16)}, as_msf),
                   ({"patch_size": (16, 8)}, r"patch_size \(16, 8\): an int or an equal pair")],
    "num_classes": [({"num_classes": 5}, lambda s: s.num_classes == 5),
                    ({"num_classes": 0}, r"num_classes 0: the released head is a Linear with no outputs")],
    "dim": [({"dim": 32}, lambda s: s.dim == 32)],
    "depth": [({"depth": 3}, lambda s: s.depth == 3)],
    "heads": [({"heads": 4}, lambda s: s.block.attention.heads == 4)],
    "mlp_dim": [({"mlp_dim": 64}, lambda s: s.block.ffn.hidden == 64)],
    "channels": [({"channels": 1}, lambda s: s.in_chans == 1)],
    "dim_head": [({"dim_head": 16}, lambda s: s.block.attention.head_dim == 16),
                 ({"dim_head": None}, lambda s: s.block.attention.head_dim == 64)],  # None: left out, the default
    "att": [({"att": "orig-g2"}, lambda s: isinstance(s.block.attention, MHSA) and
             s.block.attention.projections.groups == 2),
            ({"att": None}, r"att must be 'orig' or 'msf', optionally with '-gN'; got 'origAtt' \(the constructor's "
                            r"default, for which get_attention_module returns no module\)")],
    "required": [({"dim": None}, r"missing dim \(the released constructor has no default for it\)")],
    "unknown keys": [({"pool": "cls"}, r"unknown argument 'pool'; the released constructor takes image_size, ")],
}


def test_the_msf_cases_cover_every_constructor_argument():
    assert tuple(vspec.models.msf.convert.MSF.arguments) == MSF_CONSTRUCTOR
    assert list(MSF_CASES) == [*MSF_CONSTRUCTOR, "required", "unknown keys"]


@pytest.mark.parametrize(**argument_cases(MSF_CASES))
def test_every_msf_argument_is_honoured_or_refused_by_name(changes, expect):
    config = {**msf_fixture()["config"], **changes}
    config = {k: v for k, v in config.items() if v is not None}  # None: the argument left out
    check_argument("msf", "MSF", msf_fixture()["state_dict"], config, expect)


# ---------------------------------------------------------------- training
def test_a_tiny_msf_model_trains_with_the_msf_recipe(tmp_path):
    """The `msf` recipe (mixup / cutmix 0.2, no EMA) on a tiny 2-group MSF SimpleViT, a few steps on digits."""
    from vspec.cli.train import main as train_main
    from vspec.weights.checkpoint import read

    spec = vspec.override(vspec.load_spec(ROOT / "specs" / "msf_vit_ti_g2.py"),
                          {"depth": 2, "dim": 32, "block.attention.heads": 2, "block.attention.head_dim": 16,
                           "img_size": 32, "embedder.patch_size": 8, "num_classes": 10})
    path = tmp_path / "msf.json"
    path.write_text(vspec.to_json(spec))
    out = tmp_path / "run"
    assert train_main([str(path), "--data", "digits", "--recipe", "msf", "--epochs", "1", "--max-steps", "3",
                       "--batch-size", "32", "--device", "cpu", "--out", str(out)]) == 0
    ckpt = read(out / "last.pt")
    assert ckpt["recipe"]["mixup"] == 0.2 and ckpt["global_step"] == 3
    assert vspec.from_json(ckpt["spec"]) == spec


# ---------------------------------------------------------------- analysis (Eq. 13, Fig. 3, Fig. 4)
@settings(max_examples=20, deadline=None)
@given(d=st.integers(2, 12), seed=st.integers(0, 2**16), data=st.data())
def test_subspace_similarity_reads_the_subspaces(d, seed, data):
    """Eq. 13 is 1 for two bases of one subspace, 0 for orthogonal subspaces, symmetric, in [0, 1]."""
    from vspec.models.msf.analysis import subspace_similarity

    k = data.draw(st.integers(1, d // 2))
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=F64))
    x, y = q[:, :k] @ torch.randn(k, k, generator=g, dtype=F64), q[:, k:2 * k]
    assert abs(subspace_similarity(x, x @ torch.randn(k, k, generator=g, dtype=F64)) - 1) < 1e-9
    assert abs(subspace_similarity(x, y)) < 1e-9
    z = torch.randn(d, k, generator=g, dtype=F64)
    assert abs(subspace_similarity(x, z) - subspace_similarity(z, x)) < 1e-9 and 0 <= subspace_similarity(x, z) <= 1


def test_analyze_writes_both_plots_and_reads_tied_roles_and_norms(tmp_path, capsys, monkeypatch):
    """`vspec analyze` on a spec (random init, its files in runs/analyze/, not beside the spec) and on a checkpoint:
    the PNG and the JSON; roles sharing a matrix (Table 1i: VALUE = KEY, PROBE = QUERY) have similarity 1; the
    feature norms are those of the tokens after the embedding and after each block, computed here block by block."""
    from vspec.cli import main

    monkeypatch.chdir(tmp_path)

    spec = vspec.override(vspec.load_spec(ROOT / "specs" / "msf_vit_ti.py"),
                          {"depth": 2, "dim": 32, "block.attention.heads": 2, "block.attention.head_dim": 8,
                           "img_size": 32, "num_classes": 4, "block.attention.projections.roles": "QKKQW"})
    path = tmp_path / "tiny.json"
    path.write_text(vspec.to_json(spec))
    assert main(["analyze", str(path), "--batch-size", "3", "--seed", "5"]) == 0
    png, out = tmp_path / "runs/analyze/tiny.analysis.png", tmp_path / "runs/analyze/tiny.analysis.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "tiny.json"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = __import__("json").loads(out.read_text())
    assert [layer["roles"] for layer in result["layers"]] == ["QKVPW"] * 2
    for layer in result["layers"]:
        sim = torch.tensor(layer["similarity"])
        assert torch.allclose(sim, sim.T, atol=1e-9) and torch.allclose(sim.diagonal(), torch.ones(5), atol=1e-9)
        assert abs(sim[1, 2] - 1) < 1e-9 and abs(sim[0, 3] - 1) < 1e-9 and sim[0, 1] < 0.99
    torch.manual_seed(5)
    model = vspec.build(spec).eval()
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        feats = [model.forward_tokens(x)[0]]
        for block in model.stages[0].blocks:
            feats.append(block(feats[-1]).x)
    assert result["feature_norms"] == pytest.approx([float(f.norm(dim=-1).mean()) for f in feats], rel=1e-5)
    ckpt = tmp_path / "model.pt"
    assert main(["build", str(path), "--out", str(ckpt)]) == 0
    assert main(["analyze", str(ckpt), "--out-dir", str(tmp_path / "from_ckpt")]) == 0
    assert (tmp_path / "from_ckpt" / "model.analysis.png").exists()
    assert main(["analyze", str(ckpt), "--set", "depth=1"]) == 2  # --set is for specs: one line
    assert capsys.readouterr().err.count("\n") == 1
