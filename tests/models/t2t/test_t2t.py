"""T2T-ViT: the released models reproduced, their sizes, the soft split and the performer against their
equations, the random features loaded (never redrawn), SoT's head on T2T-ViT, and the T2T module composed with
the other kinds."""

import math
import re
from pathlib import Path

import attrs
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import benchmarks.released
import vspec
import vspec.models.t2t.convert
from tests.helpers.checks import (
    FIXTURES,
    argument_cases,
    assert_close_to_stored,
    assert_every_parameter_learns,
    assert_same_function,
    check_argument,
)
from tests.helpers.docs_examples import doc
from vspec.convert import ConversionError, from_official
from vspec.models.t2t.ops import performer_attention, random_features, soft_split
from vspec.spec import (
    DAFF,
    MHSA,
    MLP,
    Block,
    HeadTokenBlock,
    HeadTokens,
    MeanShiftAttention,
    MGCrP,
    RefinerAttention,
    SecondOrderHead,
    SpecError,
    SvPN,
    T2TEmbed,
)

ROOT = Path(__file__).resolve().parents[3]

# the released factories: (trainable parameters, all parameters: w and the sinusoid table are frozen parameters)
RELEASED = {"t2t_vit_7": (4_255_694, 4_310_222), "t2t_vit_12": (6_887_374, 6_941_902),
            "t2t_vit_14": (21_465_806, 21_545_550), "t2t_vit_24": (64_000_974, 64_105_934)}


def fixture(name):
    return torch.load(FIXTURES / f"{name}.pt", weights_only=True)


@pytest.mark.parametrize("name", ["t2t_performer", "t2t_transformer"])
def test_released_models_reproduced(name):
    data = fixture(name)
    model = from_official("t2t", data["state_dict"], data["config"]).eval()
    with torch.no_grad():
        assert_close_to_stored(model(data["x"]), data["y"])
    if name == "t2t_performer":  # the random features are the checkpoint's, not a new draw
        assert torch.equal(model.embedder.blocks[0].w, data["state_dict"]["tokens_to_token.attention1.w"])


def test_a_wrong_position_table_is_refused():
    data = fixture("t2t_performer")
    state = dict(data["state_dict"], pos_embed=data["state_dict"]["pos_embed"] + 1e-3)
    with pytest.raises(ConversionError, match="^pos_embed .* is not the fixed 1-D sinusoid table"):
        from_official("t2t", state, data["config"])


def perf(**changes):
    return vspec.models.t2t.convert.T2T.spec_of({**fixture("t2t_performer")["config"], **changes})


T2T_CASES = {
    "img_size": [({"img_size": 96}, lambda s: s.img_size == (96, 96)),
                 ({"img_size": [64, 64]}, lambda s: s.grid == (4, 4)),
                 ({"img_size": 72}, "img_size 72: the released model takes a square side that is a multiple of 16")],
    "tokens_type": [({"tokens_type": "transformer"}, lambda s: s.embedder.block == "transformer"),
                    ({"tokens_type": "convolution"}, "tokens_type 'convolution': vspec builds performer and")],
    "in_chans": [({"in_chans": 1}, lambda s: s.in_chans == 1)],
    "num_classes": [({"num_classes": 7}, lambda s: s.num_classes == 7)],
    "embed_dim": [({"embed_dim": 32}, lambda s: s.dim == 32)],
    "depth": [({"depth": 3}, lambda s: s.depth == 3)],
    "num_heads": [({"num_heads": 4}, lambda s: s.block.attention.heads == 4)],
    "mlp_ratio": [({"mlp_ratio": 3.0}, lambda s: s.block.ffn.hidden_dim(64) == 192)],
    "qkv_bias": [({"qkv_bias": True}, lambda s: s.block.attention.qkv_bias)],
    "qk_scale": [({"qk_scale": 64**-0.5}, lambda s: s.block.attention.scale == 64**-0.5)],
    "drop_rate": [({"drop_rate": 0.1}, "drop_rate 0.1: the released model also drops after the position table")],
    "attn_drop_rate": [({"attn_drop_rate": 0.1}, lambda s: s.block.attention.attn_drop == 0.1)],
    "drop_path_rate": [({"drop_path_rate": 0.1}, lambda s: s.drop_path == 0.1)],
    "norm_layer": [({"norm_layer": "LayerNorm(eps=1e-6)"}, lambda s: s.block.norm.eps == 1e-6),
                   ({"norm_layer": "BatchNorm"}, "norm_layer 'BatchNorm': only torch's LayerNorm")],
    "token_dim": [({"token_dim": 16}, lambda s: s.embedder.token_dim == 16)],
    "unknown": [({"tokens_typ": "performer"}, "unknown argument 'tokens_typ'")],
}


def test_the_t2t_cases_cover_every_constructor_argument():
    assert set(T2T_CASES) - {"unknown"} == set(vspec.models.t2t.convert.T2T.arguments)


@pytest.mark.parametrize(**argument_cases(T2T_CASES))
def test_every_t2t_argument_is_honoured_or_refused_by_name(changes, expect):
    data = fixture("t2t_performer")
    check_argument("t2t", "T2T", data["state_dict"], {**data["config"], **changes}, expect)


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_released_sizes(name):
    """Trainable parameters as vspec counts them; the released count adds the frozen w and sinusoid table."""
    spec = vspec.load_spec(ROOT / f"specs/{name}.py")
    model = vspec.build(spec, "meta")
    trainable, every = RELEASED[name]
    assert vspec.profile(spec).params == trainable
    frozen = sum(b.numel() for n, b in model.named_buffers() if n.endswith(".w")) + model.pos_embed.numel()
    assert trainable + frozen == every
    transformer = vspec.override(spec, {"embedder.block": "transformer"})  # no w; a 3 x 64 x 64 smaller kqv bias
    assert vspec.profile(transformer).params == trainable - 2 * 3 * 64


@given(c=st.integers(1, 3), h=st.integers(3, 9), w=st.integers(3, 9), split=st.sampled_from([(7, 4, 2), (3, 2, 1)]))
def test_soft_split_is_eq3(c, h, w, split):
    """Token (i, j) holds the k x k patch at (i s - p, j s - p) of the zero-padded map, channel-major."""
    k, s, p = split
    x = torch.randn(1, c, h, w, dtype=torch.float64)
    padded = torch.nn.functional.pad(x, (p, p, p, p))
    rows, cols = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    expected = torch.stack([padded[0, :, i * s:i * s + k, j * s:j * s + k].reshape(-1)
                            for i in range(rows) for j in range(cols)])
    assert torch.equal(soft_split(x, k, s, p)[0], expected)


@given(t=st.integers(1, 6), d=st.integers(1, 5), m=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_performer_attention_is_the_kernelised_attention(t, d, m, seed):
    """y_t = sum_i K(q_t, k_i) v_i / (sum_i K(q_t, k_i) + eps) with K(q, k) = phi(q) . phi(k) and
    phi(x) = exp(w x - |x|^2 / 2) / sqrt(m), written token by token (float64)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, t, d, generator=g, dtype=torch.float64) for _ in range(3))
    w = torch.randn(m, d, generator=g, dtype=torch.float64)

    def phi(x):
        values = [math.exp(float(w[r] @ x - x @ x / 2)) / math.sqrt(m) for r in range(m)]
        return torch.tensor(values, dtype=torch.float64)

    got = performer_attention(q, k, v, w)
    for b in range(2):
        for i in range(t):
            weights = torch.stack([phi(q[b, i]) @ phi(k[b, j]) for j in range(t)])
            expected = (weights[:, None] * v[b]).sum(0) / (weights.sum() + 1e-8)
            assert torch.allclose(got[b, i], expected, rtol=1e-10, atol=1e-12)


def test_random_features_are_orthogonal_rows_of_norm_sqrt_m():
    w = random_features(16, 32, torch.Generator().manual_seed(0)).double()
    assert torch.allclose(w @ w.T, 16 * torch.eye(16, dtype=torch.float64), atol=1e-4)


def test_the_random_features_are_loaded_never_redrawn():
    """Two builds draw different w; loading one model's state dict makes the other give its outputs."""
    spec = perf()
    torch.manual_seed(0)
    a = vspec.build(spec).eval()
    torch.manual_seed(1)
    b = vspec.build(spec).eval()
    assert not torch.equal(a.embedder.blocks[0].w, b.embedder.blocks[0].w)
    assert "embedder.blocks.0.w" in a.state_dict() and not any(n.endswith(".w") for n, _ in a.named_parameters())
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(a(x), b(x))


def test_performer_runs_in_float32_at_least():
    """bfloat16 autocast: the exponentials are computed in float32 (the released code casts too)."""
    q, k, v = (torch.randn(1, 5, 4) * 3 for _ in range(3))
    w = random_features(2, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert performer_attention(q, k, v, w).dtype == torch.float32
    assert performer_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), w).dtype == torch.float32
    assert performer_attention(q.double(), k.double(), v.double(), w.double()).dtype == torch.float64


def test_any_multiple_of_16_and_other_aspects():
    spec = attrs.evolve(perf(), img_size=(32, 48))
    assert spec.grid == (2, 3)
    assert vspec.build(spec)(torch.randn(1, 3, 32, 48)).shape == (1, 10)
    with pytest.raises(SpecError, match=r"^embedder: the soft splits reduce the image 16-fold: its width 40"):
        attrs.evolve(perf(), img_size=(32, 40))


def test_transformer_token_block_options_are_refused():
    with pytest.raises(SpecError, match="^T2TEmbed.drop: sets the performer token block"):
        T2TEmbed(block="transformer", drop=0.0)


COMPOSED = {
    "sot_head": {"head": SecondOrderHead(pool=MGCrP(heads=2, m=4, n=4), norm=SvPN())},
    "msf": {"block": Block(attention=MeanShiftAttention(heads=2), ffn=MLP(ratio=2.0))},
    "refiner": {"block": Block(attention=RefinerAttention(heads=2), ffn=MLP(ratio=2.0))},
    "daff": {"block": HeadTokenBlock(attention=MHSA(heads=2), ffn=DAFF(), head_tokens=HeadTokens())},
}


@pytest.mark.parametrize("case", sorted(COMPOSED))
def test_the_t2t_module_composes_with_other_kinds(case):
    """It is an embedder like any: SoT's head, mean-shift and refiner attention, DAFF with head tokens."""
    base = perf(depth=2)
    changes = dict(COMPOSED[case])
    if "block" in changes:
        changes["block"] = attrs.evolve(changes["block"], norm=base.block.norm)
    spec = attrs.evolve(base, **changes)
    torch.manual_seed(0)
    model = vspec.build(spec).eval().double()
    out = model(torch.randn(2, 3, 64, 64, dtype=torch.float64))
    (out * torch.randn_like(out)).sum().backward()
    assert_every_parameter_learns(model)


def test_readme_t2t_table_holds_the_measurement():
    """The T2T page's table: vspec's trainable and released-convention counts and MACs, measured."""
    text = doc("families/t2t")
    rows = re.findall(r"^\| (t2t_vit_\w+) \| ([\d.]+) M \| ([\d.]+) M \| [\d.–-]+ M \| ([\d.]+) G \| ([\d.]+) G \|",
                      text, re.M)
    assert {r[0] for r in rows} == {"t2t_vit_7", "t2t_vit_12", "t2t_vit_14", "t2t_vit_24", "t2t_vit_12_sot",
                                    "t2t_vit_14_sot", "t2t_vit_24_sot"}
    for name, trainable, every, conv_linear, total in rows:
        spec = vspec.load_spec(ROOT / f"specs/{name}.py")
        prof, model = vspec.profile(spec), vspec.build(spec, "meta")
        frozen = sum(b.numel() for n, b in model.named_buffers() if n.endswith(".w")) + model.pos_embed.numel()
        assert (trainable, every) == (f"{prof.params / 1e6:.3f}", f"{(prof.params + frozen) / 1e6:.3f}")
        assert (conv_linear, total) == (f"{prof.conventions['conv_linear'] / 1e9:.3f}", f"{prof.macs / 1e9:.3f}")


def test_readme_t2t_head_sizes():
    """The T2T page's reasons for each head size: 6 x 36 x 36 on T2T-ViT-24 is Table 5c's 72.1 M; on T2T-ViT-14,
    21 x 21 and 22 x 22 straddle 24.4 M; the head's MACs on T2T-ViT-12 / 14 / 24."""
    text = doc("families/t2t")

    def released(spec):
        model = vspec.build(spec, "meta")
        return vspec.profile(spec).params + model.pos_embed.numel() + sum(
            b.numel() for n, b in model.named_buffers() if n.endswith(".w"))

    t14 = vspec.load_spec(ROOT / "specs/t2t_vit_14_sot.py")
    assert (t14.head.pool.m, t14.head.pool.n) == (21, 21)
    m22 = released(vspec.override(t14, {"head.pool.m": 22, "head.pool.n": 22}))
    assert released(t14) < 24.4e6 < m22 and f"22 x 22 {m22 / 1e6:.3f} M" in text
    assert 24.4e6 - released(t14) < m22 - 24.4e6  # the nearest
    added = []
    for name in ("t2t_vit_12", "t2t_vit_14", "t2t_vit_24"):
        bare, sot = (vspec.profile(vspec.load_spec(ROOT / f"specs/{n}.py")).macs for n in (name, f"{name}_sot"))
        added.append(f"{(sot - bare) / 1e6:.0f}")
    assert f"The head adds {' / '.join(added)} M MACs" in text
    t_24, t24 = (vspec.profile(vspec.load_spec(ROOT / f"specs/t2t_vit_{n}24.py")).macs for n in ("t_", ""))
    assert f"would add {(t_24 - t24) / 1e9:.1f} G" in text


@pytest.mark.parametrize("name", ["t2t_performer", "t2t_transformer"])
def test_the_benchmarks_released_formulation_reproduces_the_fixture_and_equals_vspec(name):
    """benchmarks/released.py's T2T_ViT loads the released state dict strictly and reproduces its output, and
    vspec's conversion of it computes the same logits and input gradients (what benchmarks/models.py races)."""
    data = fixture(name)
    ref = benchmarks.released.T2TViT(data["config"])
    ref.load_state_dict(data["state_dict"], strict=True)
    ours = from_official("t2t", data["state_dict"], data["config"])
    with torch.no_grad():
        assert_close_to_stored(ref.eval()(data["x"]), data["y"])
    assert_same_function(ref, ours.eval(), data["x"])
