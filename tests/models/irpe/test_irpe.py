"""iRPE: the released checkpoints reproduced, every constructor argument honoured or refused, the bias and the
values' encodings against a float64 reference written from the paper's equations, the SDPA path against an
explicit softmax, the presets' sizes, and the attention composed with the other kinds."""

import math
import re
from pathlib import Path

import attrs
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import benchmarks.released
import vspec
import vspec.models.irpe.convert
from tests.helpers.checks import (
    FIXTURES,
    argument_cases,
    assert_close_to_stored,
    assert_every_parameter_learns,
    assert_same_function,
    check_argument,
)
from tests.helpers.docs_examples import doc
from vspec.convert import from_official
from vspec.models.irpe.modules import IRPECore
from vspec.models.irpe.ops import product_buckets
from vspec.nn import BuildContext
from vspec.spec import (
    DAFF,
    SOPE,
    Block,
    ClassTokenHead,
    ConvStem,
    DenseAux,
    GAPHead,
    HeadTokenBlock,
    HeadTokens,
    IRPEAttention,
    MeanShiftAttention,
    MGCrP,
    Model,
    PatchEmbed,
    PatchMerging,
    Projections,
    RefinerAttention,
    SecondOrderHead,
    SimplePatchEmbed,
    SpecError,
    Stage,
    SvPN,
    TokenEmbed,
    Tokens,
    WindowMHSA,
)

ROOT = Path(__file__).resolve().parents[3]


def fixture(name: str = "k") -> dict:
    return torch.load(FIXTURES / f"irpe_ctx_product_{name}.pt", weights_only=True)


@pytest.mark.parametrize("name", ["k", "qkv"])
def test_released_checkpoints_reproduced(name):
    data = fixture(name)
    model = from_official("irpe", data["state_dict"], data["config"]).eval()
    with torch.no_grad():
        assert_close_to_stored(model(data["x"]), data["y"])


@pytest.mark.parametrize("name", ["k", "qkv"])
def test_the_offset_is_the_query_position_minus_the_key_position(name):
    """The other sign (the buckets transposed) moves the logits far beyond the tolerance: the fixtures fix it."""
    data = fixture(name)
    model = from_official("irpe", data["state_dict"], data["config"]).eval()
    for block in model.stages[0].blocks:
        block.attn.core.buckets = block.attn.core.buckets.T.contiguous()
    with torch.no_grad():
        assert (model(data["x"]) - data["y"]).abs().max() > 1e-3


def test_the_released_buckets():
    """Offsets 0, 1, 2, 3, >= 4 -> 0, 1, 2, 2, 3 per axis; bucket (r + 3) 7 + (c + 3); 49 for the class token's
    row and column (the fixture README)."""
    b = product_buckets((8, 8), 1, 0, 1.9, 3.8, 15.2)
    assert b.shape == (65, 65) and (b[0] == 49).all() and (b[:, 0] == 49).all() and int(b[1:, 1:].max()) == 48
    row0 = b[1, 1:9]  # query at (0, 0), keys along row 0: offset c = -col
    assert row0.tolist() == [(0 + 3) * 7 + (c + 3) for c in (0, -1, -2, -2, -3, -3, -3, -3)]
    assert b[1 + 8 * 5, 1].item() == (3 + 3) * 7 + 3  # query (5, 0), key (0, 0): offset (5, 0) -> (3, 0)


def test_the_last_blocks_key_table_cannot_move_a_class_token_head():
    """The fixture README's fact: the class token's query row uses one bucket for every key, a constant shift
    that softmax removes; only that row reaches the class-token head."""
    data = fixture("k")
    model = from_official("irpe", data["state_dict"], data["config"]).double()
    model(data["x"].double()).sum().backward()
    grads = [b.attn.core.table_k.grad.abs().max().item() for b in model.stages[0].blocks]
    assert grads[0] > 1e-3 and grads[-1] < 1e-12


# ------------------------------------------------------------------------------------ the constructor
# rpe_vision_transformer.VisionTransformer.__init__'s arguments (microsoft/Cream @ 4a13c40), then the fixtures' records
IRPE_CONSTRUCTOR = (
    "img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth", "num_heads", "mlp_ratio", "qkv_bias",
    "qk_scale", "drop_rate", "attn_drop_rate", "drop_path_rate", "hybrid_backbone", "norm_layer", "rpe_config",
    "rpe_config_args", "rpe_method_ids",
)


def attentions(spec):
    return [b.attention for b in spec.stages[0].blocks]


def as_k(spec):
    return spec == vspec.models.irpe.convert.IRPE.spec_of(fixture("k")["config"])


def single(**changes):
    return {**fixture("k")["config"]["rpe_config"]["rpe_k"], **changes}


def rpe(q=None, k=None, v=None):
    return {"rpe_config": {"rpe_q": q, "rpe_k": k, "rpe_v": v}}


IRPE_CASES = {
    "img_size": [({"img_size": 32}, lambda s: s.img_size == (32, 32) and s.grid == (4, 4)),
                 ({"img_size": [64, 64]}, as_k),
                 ({"img_size": (32, 48)}, r"img_size \(32, 48\): the released attention takes its grid as int")],
    "patch_size": [({"patch_size": 16}, lambda s: s.embedder == PatchEmbed(patch_size=16))],
    "in_chans": [({"in_chans": 1}, lambda s: s.in_chans == 1)],
    "num_classes": [({"num_classes": 0}, lambda s: s.num_classes == 0)],
    "embed_dim": [({"embed_dim": 32}, lambda s: s.dim == 32 and s.block.ffn.hidden_dim(s.dim) == 128)],
    "depth": [({"depth": 3}, lambda s: s.depth == 3)],
    "num_heads": [({"num_heads": 4}, lambda s: {a.heads for a in attentions(s)} == {4})],
    "mlp_ratio": [({"mlp_ratio": 2}, lambda s: s.block.ffn.hidden_dim(s.dim) == 128)],
    "qkv_bias": [({"qkv_bias": False}, lambda s: {a.qkv_bias for a in attentions(s)} == {False})],
    "qk_scale": [({"qk_scale": 0.0625}, lambda s: {a.scale for a in attentions(s)} == {0.0625}),
                 ({"qk_scale": None}, as_k)],
    "drop_rate": [({"drop_rate": 0.0}, as_k),
                  ({"drop_rate": 0.1}, r"drop_rate 0.1: it also drops after the position embedding")],
    "attn_drop_rate": [({"attn_drop_rate": 0.1}, lambda s: {a.attn_drop for a in attentions(s)} == {0.1})],
    "drop_path_rate": [({"drop_path_rate": 0.1}, lambda s: s.drop_path == 0.1)],
    "hybrid_backbone": [({"hybrid_backbone": "resnet26d"}, r"hybrid_backbone 'resnet26d': the CNN stem")],
    "norm_layer": [({"norm_layer": "LayerNorm"}, lambda s: s.block.norm.eps == 1e-5),
                   ({"norm_layer": "BatchNorm"}, r"norm_layer 'BatchNorm': only LayerNorm")],
    "rpe_config": [
        (rpe(k=single()), as_k),
        (rpe(q=single(), k=single(), v=single()), lambda s: {a.on for a in attentions(s)} == {"qkv"}),
        (rpe(v=single()), lambda s: {a.on for a in attentions(s)} == {"v"}),
        (rpe(k=single(shared_head=False)), lambda s: {a.shared_head for a in attentions(s)} == {False}),
        (rpe(k=single(alpha=1.0, beta=2.0, gamma=8.0, num_buckets=26)),
         lambda s: {(a.alpha, a.beta, a.gamma) for a in attentions(s)} == {(1.0, 2.0, 8.0)}),
        ({"rpe_config": None}, r"rpe_config None: a dict with rpe_q, rpe_k, rpe_v"),
        (rpe(), r"rpe_config has no place"),
        (rpe(k=single(mode="bias")), r"rpe_config mode 'bias': only 'contextual'"),
        (rpe(k=single(method=0)), r"rpe_config method 0: only the product method"),
        (rpe(k=single(num_buckets=49)), r"rpe_config num_buckets 49: the product method with the class token's"),
        (rpe(q=single(), k=single(alpha=1.0)), r"rpe_config: the places' configs differ"),
        (rpe(k={"mode": "contextual"}), r"rpe_config.rpe_k \{'mode': 'contextual'\}: a single config with")],
    "rpe_config_args": [({"rpe_config_args": None}, as_k),
                        ({"rpe_config_args": {"skip": 0}}, r"rpe_config_args \{'skip': 0\}: skip must be 1")],
    "rpe_method_ids": [({"rpe_method_ids": None}, as_k),
                       ({"rpe_method_ids": {"PRODUCT": 2}}, r"rpe_method_ids \{'PRODUCT': 2\}: PRODUCT must be 3")],
    "unknown keys": [({"apply_dhvt": True}, r"unknown argument 'apply_dhvt'; the released constructor takes img_size")],
}


def test_the_irpe_cases_cover_every_constructor_argument():
    assert tuple(vspec.models.irpe.convert.IRPE.arguments) == IRPE_CONSTRUCTOR
    assert list(IRPE_CASES) == [*IRPE_CONSTRUCTOR, "unknown keys"]


@pytest.mark.parametrize(**argument_cases(IRPE_CASES))
def test_every_irpe_argument_is_honoured_or_refused_by_name(changes, expect):
    data = fixture("k")
    check_argument("irpe", "iRPE", data["state_dict"], {**data["config"], **changes}, expect)


def test_irpe_training_only_arguments_leave_the_eval_output_as_released():
    data = fixture("qkv")
    config = {**data["config"], "attn_drop_rate": 0.1, "drop_path_rate": 0.1}
    model = from_official("irpe", data["state_dict"], config).eval()
    with torch.no_grad():
        assert_close_to_stored(model(data["x"]), data["y"])


# ------------------------------------------------------------------------------------ against the equations
def g(d: int, alpha: float, beta: float, gamma: float) -> int:
    """iRPE Eq. 18 for one offset, truncated to an integer as released."""
    if abs(d) <= alpha:
        return round(d)
    far = round(alpha + math.log(abs(d) / alpha) / math.log(gamma / alpha) * (beta - alpha))
    return int(math.copysign(min(beta, far), d))


def reference_bucket(i: int, j: int, tokens: Tokens, spec: IRPEAttention) -> int:
    """The product method's bucket of query i and key j (Sec. 3.3); off-grid tokens share the last bucket."""
    b, side = int(spec.beta), 2 * int(spec.beta) + 1
    cells = range(tokens.prefix, tokens.prefix + tokens.patches)
    if i not in cells or j not in cells:
        return side * side
    (ri, ci), (rj, cj) = divmod(i - tokens.prefix, tokens.grid[1]), divmod(j - tokens.prefix, tokens.grid[1])
    coeffs = spec.alpha, spec.beta, spec.gamma
    return (g(ri - rj, *coeffs) + b) * side + g(ci - cj, *coeffs) + b


def reference(q, k, v, tables, tokens, spec, scale):
    """softmax(q k^T scale + bias) v + values' term, loop by loop (Eq. 13-16), float64."""
    batch, heads, n, _ = q.shape
    bucket = [[reference_bucket(i, j, tokens, spec) for j in range(n)] for i in range(n)]
    out = torch.zeros_like(v)
    for bi in range(batch):
        for h in range(heads):
            t = 0 if spec.shared_head else h
            logits = torch.zeros(n, n, dtype=torch.float64)
            for i in range(n):
                for j in range(n):
                    e = scale * torch.dot(q[bi, h, i], k[bi, h, j])
                    if "k" in spec.on:
                        e = e + scale * torch.dot(q[bi, h, i], tables["k"][t, :, bucket[i][j]])
                    if "q" in spec.on:
                        e = e + scale * torch.dot(k[bi, h, j], tables["q"][t, :, bucket[j][i]])
                    logits[i, j] = e
            attn = logits.softmax(-1)
            for i in range(n):
                for j in range(n):
                    value = v[bi, h, j] + (tables["v"][t, bucket[i][j]] if "v" in spec.on else 0)
                    out[bi, h, i] += attn[i, j] * value
    return out


@settings(max_examples=25, deadline=None)
@given(h=st.integers(1, 4), w=st.integers(1, 4), prefix=st.integers(0, 1), joined=st.integers(0, 2),
       heads=st.integers(1, 2), head_dim=st.integers(1, 3), shared=st.booleans(),
       on=st.sampled_from(["q", "k", "v", "qk", "kv", "qkv"]), coeffs=st.sampled_from([(1.9, 3.8, 15.2),
                                                                                     (1.0, 2.0, 8.0)]),
       seed=st.integers(0, 2**16))
def test_the_core_against_the_papers_equations(h, w, prefix, joined, heads, head_dim, shared, on, coeffs, seed):
    tokens = Tokens(heads * head_dim, (h, w), prefix, joined)
    spec = IRPEAttention(heads=heads, on=on, shared_head=shared, alpha=coeffs[0], beta=coeffs[1], gamma=coeffs[2])
    core = IRPECore(spec, BuildContext(tokens=tokens, in_chans=3, num_classes=0, build=None)).double()
    gen = torch.Generator().manual_seed(seed)
    tables = {}
    for p in on:
        param = getattr(core, f"table_{p}")
        param.data = torch.randn(param.shape, generator=gen, dtype=torch.float64)
        tables[p] = param.data
    q, k, v = (torch.randn(2, heads, tokens.length, head_dim, generator=gen, dtype=torch.float64) for _ in range(3))
    expected = reference(q, k, v, tables, tokens, spec, head_dim**-0.5)
    assert torch.allclose(core(q, k, v), expected, atol=1e-10)
    if "v" not in on:  # the map analysis reads
        got = core.attention_map(q, k) @ v
        assert torch.allclose(got, expected, atol=1e-10)


@pytest.mark.parametrize("on", ["k", "qk"])
def test_the_sdpa_float_mask_path_is_the_explicit_softmax(on):
    """Keys (and queries) only: the bias goes to SDPA as its float mask; equal to softmax written out, and with
    zero tables (the released init) to attention without any mask."""
    spec = IRPEAttention(heads=3, on=on)
    tokens = Tokens(48, (3, 5), 1)
    core = IRPECore(spec, BuildContext(tokens=tokens, in_chans=3, num_classes=0, build=None))
    q, k, v = (torch.randn(2, 3, tokens.length, 16) for _ in range(3))
    plain = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(core(q, k, v), plain, atol=1e-6)  # zero tables: no bias
    for p in on:
        torch.nn.init.normal_(getattr(core, f"table_{p}"))
    explicit = ((q @ k.transpose(-2, -1)) * 16**-0.5 + core.bias(q, k)).softmax(-1) @ v
    got = core(q, k, v)
    assert torch.allclose(got, explicit, atol=1e-6) and not torch.allclose(got, plain, atol=1e-3)


# ------------------------------------------------------------------------------------ presets, the iRPE page
def test_presets_sizes_and_coverage():
    k = vspec.profile(vspec.load_spec(ROOT / "specs/deit_tiny_irpe_k.py"))
    deit = vspec.profile(vspec.load_spec(ROOT / "specs/deit_tiny.py"))
    assert k.params == 5_755_816 == deit.params + 12 * 64 * 50  # one (1, 64, 50) key table per block
    lookups = 12 * 3 * 197 * 64 * 50  # (q * scale) @ W per block: heads x tokens x head_dim x buckets
    assert k.macs == deit.macs + lookups and k.conventions["conv_linear"] == deit.conventions["conv_linear"]
    assert k.unsupported_ops == [] and k.crosscheck_macs == k.macs


def test_readme_irpe_table_holds_the_measurement():
    """The iRPE page's table beside SoT Table 5a (7.0 M, 2.3 G for iRPE-K-T + ours)."""
    text = doc("families/irpe")
    rows = re.findall(r"^\| (deit_tiny_irpe_k\w*) \| ([\d.]+) M \| ([\d.]+ M|-) \| ([\d.]+) G \| ([\d.]+) G \| "
                      r"([\d.]+ G|-) \|$", text, re.M)
    assert [r[0] for r in rows] == ["deit_tiny_irpe_k", "deit_tiny_irpe_k_sot"]
    for name, params, paper_params, conv_linear, total, paper_flops in rows:
        prof = vspec.profile(vspec.load_spec(ROOT / f"specs/{name}.py"))
        assert params == f"{prof.params / 1e6:.3f}"
        assert conv_linear == f"{prof.conventions['conv_linear'] / 1e9:.3f}"
        assert total == f"{prof.macs / 1e9:.3f}"
        if name.endswith("_sot"):
            assert (paper_params, paper_flops) == ("7.0 M", "2.3 G")  # SoT Table 5a
            sot = vspec.profile(vspec.load_spec(ROOT / "specs/deit_tiny_sot.py"))
            assert prof.params - sot.params == 12 * 64 * 50 == 38_400 and "12 x 64 x 50 = 38,400" in text
            assert prof.conventions["conv_linear"] == sot.conventions["conv_linear"]
            assert abs(prof.params / 1e6 - 7.0) < 0.1 and abs(prof.conventions["conv_linear"] / 1e9 - 2.3) < 0.1


# ------------------------------------------------------------------------------------ composition
def irpe(heads: int = 2, on: str = "k") -> IRPEAttention:
    return IRPEAttention(heads=heads, on=on)


def small(**changes) -> Model:
    base = dict(embedder=PatchEmbed(patch_size=4), block=Block(attention=irpe()), depth=2, dim=16, num_classes=3,
                img_size=16)
    return Model(**{**base, **changes})


COMPOSED = {
    "sot head and embedding": lambda: vspec.override(vspec.load_spec(ROOT / "specs/deit_tiny_irpe_k_sot.py"),
                                                     {"img_size": 48, "depth": 2, "num_classes": 3}),
    "sot head, qkv": lambda: small(head=SecondOrderHead(fusion="sum", pool=MGCrP(heads=2, m=3, n=3), norm=SvPN()),
                                   block=Block(attention=irpe(on="qkv"))),
    "msf stack": lambda: small(embedder=SimplePatchEmbed(patch_size=4), class_token=False, pos_embed="sincos2d",
                               head=GAPHead(), block=[Block(attention=MeanShiftAttention(heads=2)),
                                                      Block(attention=irpe(on="qkv"))]),
    "msf projections, tied and grouped": lambda: small(head=GAPHead(), block=Block(attention=IRPEAttention(
        heads=2, on="qkv", projections=Projections(roles="QKKW", groups=2)))),
    "refiner stem, dense head, refiner block": lambda: small(
        embedder=ConvStem(patch_size=4, width=4), head=ClassTokenHead(dense=DenseAux()),
        block=[Block(attention=irpe()), Block(attention=RefinerAttention(heads=2))]),
    "daff and head tokens": lambda: small(embedder=SOPE(patch_size=4), pos_embed="none", block=HeadTokenBlock(
        attention=irpe(on="qk"), ffn=DAFF(), head_tokens=HeadTokens())),
    "non-square grid": lambda: small(img_size=(12, 20), head=GAPHead(), block=Block(attention=irpe(on="qkv"))),
    "hierarchical, windows then global": lambda: Model(
        embedder=PatchEmbed(patch_size=4), class_token=False, head=GAPHead(), num_classes=3, img_size=16,
        stages=[Stage(depth=2, dim=16, block=Block(attention=WindowMHSA(heads=2, window=2))),
                Stage(depth=2, dim=32, block=Block(attention=irpe(on="qkv")), entry=PatchMerging())]),
}


@pytest.mark.parametrize("name", sorted(COMPOSED))
def test_irpe_composes(name):
    spec = COMPOSED[name]()
    assert any(isinstance(b.attention, IRPEAttention) for _, b in spec.named_blocks())
    torch.manual_seed(0)
    model = vspec.build(spec).eval().double()
    for core in (m for m in model.modules() if isinstance(m, IRPECore)):  # tables off zero (the released init)
        for p in core.parameters():
            torch.nn.init.normal_(p, std=0.1)
    out = model(vspec.example_input(spec, 2, dtype=torch.float64))
    (out * torch.randn_like(out)).sum().backward()
    assert_every_parameter_learns(model)  # none ends on an iRPE key table read by a class-token head alone
    for m in model.modules():  # the buckets follow each attention's own tokens (grid, class token, head tokens)
        if isinstance(m, IRPECore):
            assert m.buckets.shape[0] == m.buckets.shape[1] and m.buckets.shape[0] >= 2
    prof = vspec.profile(spec)
    assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs


def test_head_tokens_take_the_off_grid_bucket():
    spec = small(block=HeadTokenBlock(attention=irpe(), head_tokens=HeadTokens()))
    core = vspec.build(spec).stages[0].blocks[0].attn.core
    n = 1 + 16 + 2  # class token, 4 x 4 grid, one head token per head
    assert core.buckets.shape == (n, n) and core.table_k.shape == (1, 8, 50)
    assert (core.buckets[-2:] == 49).all() and (core.buckets[:, -2:] == 49).all()


def test_without_off_grid_tokens_there_is_no_extra_bucket():
    spec = small(class_token=False, head=GAPHead())
    assert vspec.build(spec).stages[0].blocks[0].attn.core.table_k.shape == (1, 8, 49)


def test_irpe_refuses_what_it_cannot_do():
    text = dict(embedder=TokenEmbed(vocab_size=50, max_positions=12, seq_len=8), class_token=False, pos_embed="none",
                head=vspec.spec.FirstTokenHead())
    with pytest.raises(SpecError, match=r"block\.attention.*irpe needs an image's token grid"):
        small(**text)
    with pytest.raises(SpecError, match=r"gamma.*must exceed alpha"):
        IRPEAttention(alpha=2.0, gamma=2.0)
    with pytest.raises(SpecError, match=r"beta.*must be at least alpha"):
        IRPEAttention(alpha=3.0, beta=2.0)
    with pytest.raises(SpecError, match=r"block\.1\.attention"):  # a refiner reusing maps iRPE does not hand on
        small(block=[Block(attention=irpe()), Block(attention=RefinerAttention(heads=2, reuse=True))])
    with pytest.raises(SpecError, match=r"on"):
        IRPEAttention(on="kq")


def test_a_spec_file_round_trips():
    spec = attrs.evolve(small(), block=Block(attention=IRPEAttention(heads=2, on="qkv", shared_head=False)))
    assert vspec.from_json(vspec.to_json(spec)) == spec and vspec.from_toml(vspec.to_toml(spec)) == spec


def test_tables_start_at_zero_and_analysis_reads_the_biased_map():
    """The released init (zero tables); `vspec analyze` reads the core's map, the bias included."""
    from vspec.models.refiner.analysis import attention_maps

    spec = small(block=Block(attention=irpe(on="qk")))
    model = vspec.build(spec).eval()
    core = model.stages[0].blocks[0].attn.core
    assert (core.table_k == 0).all() and (core.table_q == 0).all() and core.table_v is None
    image = vspec.example_input(spec, 1)
    plain = attention_maps(model, image, blocks=[0])[0]["after"]
    torch.nn.init.normal_(core.table_k)
    biased = attention_maps(model, image, blocks=[0])[0]["after"]
    assert biased.shape == plain.shape == (2, 17, 17)
    assert torch.allclose(biased.sum(-1), torch.ones(2, 17, dtype=torch.float64))
    assert not torch.allclose(biased, plain, atol=1e-3)


@pytest.mark.parametrize("name,on", [("irpe_ctx_product_k", "k"), ("irpe_ctx_product_qkv", "qkv")])
def test_the_benchmarks_released_formulation_reproduces_the_fixture_and_equals_vspec(name, on):
    """benchmarks/released.py's DeiT-with-iRPE (map materialised, bias gathered from the flattened table) loads the
    released state dict strictly and reproduces its output; its constructor arguments are the fixture's; vspec's
    conversion computes the same logits and input gradients (what benchmarks/models.py races)."""
    data = torch.load(FIXTURES / f"{name}.pt", weights_only=True)
    shape = {k: data["config"][k] for k in ("img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth",
                                            "num_heads", "mlp_ratio", "qkv_bias")}
    assert benchmarks.released.irpe_config(shape, on) == data["config"]
    ref = benchmarks.released.IRPEDeiT(data["config"], on)
    ref.load_state_dict(data["state_dict"], strict=True)
    with torch.no_grad():
        assert_close_to_stored(ref.eval()(data["x"]), data["y"])
    ours = from_official("irpe", data["state_dict"], data["config"]).eval()
    assert_same_function(ref, ours, data["x"])
