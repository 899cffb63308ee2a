"""SoT's head and Refiner's attention on language bodies (issue 22): the released SoT language head reproduces the
authors' output; the masked head and refiner attention give a padded sequence exactly what it gets alone (float64);
GPT's form reads the last real token; causal refiner attention lets no later token reach an earlier one."""

import math

import attrs
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import vspec
from tests.helpers.checks import FIXTURES
from tests.helpers.text import (
    LENGTH,
    VOCAB,
    text_body,  # noqa: F401
)
from vspec.convert import ConversionError, from_official
from vspec.spec import (
    FirstTokenHead,
    MGCrP,
    Model,
    PostNormBlock,
    Refine,
    RefinerAttention,
    SecondOrderHead,
    SpecError,
    SvPN,
    TokenEmbed,
)


def batch(lengths: list[int], width: int, pad: str = "right", seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (B, width) of the given real lengths, padded with 0 on the right or the left, and the mask."""
    g = torch.Generator().manual_seed(seed)
    pos = torch.arange(width)[None]
    n = torch.tensor(lengths)[:, None]
    mask = pos < n if pad == "right" else pos >= width - n
    ids = torch.randint(1, VOCAB, (len(lengths), width), generator=g)
    return ids * mask, mask.long()


def perturb(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Weights and BatchNorm statistics moved off their initial values, so that nothing hides behind an init."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in [*model.parameters(), *(b for b in model.buffers() if b.is_floating_point())]:
            t.add_(torch.rand(t.shape, generator=g, dtype=t.dtype) * 0.2)
    return model


def alone_vs_padded(model, ids, mask) -> float:
    """The largest difference between each padded sequence's logits and those of its real tokens run alone."""
    logits = model(ids, attention_mask=mask)
    return max((model(ids[i:i + 1][mask[i:i + 1].bool()][None])[0] - logits[i]).abs().max().item()
               for i in range(len(ids)))


# ---------------------------------------------------------------- SoT's released language head
def released_head(x: torch.Tensor, sd: dict, q: int) -> torch.Tensor:
    """The fork's head written from its description (docs/families/text.md, SoT's head) in float64: two bias-free
    1x1 convolutions + BatchNorm (running statistics) + ReLU over x[:, 1:] (padding included), the mean over
    tokens removed, (1/N) X Y^T; svPN by one power iteration started from the learned q-vector: with P = Q^T,
    u = P w / |P w|, v = P^T u / |P^T u|, s = u^T P v, P' = s^0.5 u v^T + (P - s u v^T) / (s^0.5 + 1e-5);
    logits = cls_fc(x[:, 0]) + visual_fc(P'^T flattened q-major)."""
    sd = {k: v.double() if v.is_floating_point() else v for k, v in sd.items()}
    x = x.double()
    words = x[:, 1:]

    def branch(i):
        p = f"representation.conv_dr_block.{i}."
        h = words @ sd[p + "0.weight"].flatten(1).T
        h = (h - sd[p + "1.running_mean"]) / torch.sqrt(sd[p + "1.running_var"] + 1e-5) * sd[p + "1.weight"] \
            + sd[p + "1.bias"]
        h = h.clamp(min=0)
        return h - h.mean(dim=1, keepdim=True)

    xq, yk = branch(0), branch(1)
    out = []
    for b in range(x.shape[0]):
        qm = xq[b].T @ yk[b] / words.shape[1]  # (q, k)
        p = qm.T
        w = sd["normalization.weight"]
        u = p @ w
        u = u / u.norm()
        v = p.T @ u
        v = v / v.norm()
        s = u @ p @ v
        pn = s.sqrt() * torch.outer(u, v) + (p - s * torch.outer(u, v)) / (s.sqrt() + 1e-5)
        out.append(pn.T.reshape(-1))
    r = torch.stack(out)
    assert r.shape[1] == q * (sd["visual_fc.weight"].shape[1] // q)
    return x[:, 0] @ sd["cls_fc.weight"].T + sd["cls_fc.bias"] + r @ sd["visual_fc.weight"].T + sd["visual_fc.bias"]


def fixture_body() -> Model:
    return text_body(dim=64)


def test_the_released_language_head_reproduces_the_authors_output():
    """sot_text_head.pt: the fork's head alone on (2, 16, 64) final hidden states (every position after [CLS]
    pooled, padding included), as from_official builds it onto a text body: within 1e-5 of the authors' logits,
    and equal to the head written here from its description (float64)."""
    data = torch.load(FIXTURES / "sot_text_head.pt", weights_only=False)
    model = from_official("sot_text", data["state_dict"], data["config"], body=fixture_body()).eval()
    with torch.no_grad():
        got = model.forward_head(data["x"])
        assert (got - data["y"]).abs().max().item() < 1e-5
        reference = released_head(data["x"], data["state_dict"], q=24)
        assert (reference - data["y"].double()).abs().max().item() < 1e-5
        assert (model.double().forward_head(data["x"].double()) - reference).abs().max().item() < 1e-10
    assert model.spec.head.padding == "included" and model.spec.head.norm.side == "left"
    # the fork's own key names (under bert.pooler.) load the same
    prefixed = {f"bert.pooler.{k}": v for k, v in data["state_dict"].items()}
    again = from_official("sot_text", prefixed, data["config"], body=fixture_body()).eval()
    with torch.no_grad():
        assert torch.equal(again.forward_head(data["x"]), got.float())


def test_the_language_head_converter_refuses_in_one_line():
    data = torch.load(FIXTURES / "sot_text_head.pt", weights_only=False)
    sd, config = data["state_dict"], data["config"]
    with pytest.raises(ConversionError, match="pass body="):
        from_official("sot_text", sd, config)
    with pytest.raises(ConversionError, match="unused checkpoint keys: extra.weight"):
        from_official("sot_text", {**sd, "extra.weight": torch.zeros(1)}, config, body=fixture_body())
    missing = {k: v for k, v in sd.items() if not k.startswith("representation.conv_dr_block.1.0")}
    with pytest.raises(ConversionError, match="conv_dr_block.1.0.weight is missing"):
        from_official("sot_text", missing, config, body=fixture_body())
    with pytest.raises(ConversionError, match="MGCrP is not set"):
        from_official("sot_text", sd, {**config, "bert_config": {**config["bert_config"], "MGCrP": False}},
                      body=fixture_body())
    with pytest.raises(ConversionError, match="a text spec"):
        from_official("sot_text", sd, config, body=vspec.load_spec("specs/deit_tiny.py"))


# ---------------------------------------------------------------- padding invariance, exact in float64
MASKED_HEADS = {
    "released_pool_masked": SecondOrderHead(pool=MGCrP(heads=1, m=6, n=4, centering="channel", bn_relu=True),
                                            norm=SvPN(side="left"), drop=0.5),
    "multi_head": SecondOrderHead(pool=MGCrP(heads=3, m=4, n=4), drop=0.1),
    "gpt_last_token": SecondOrderHead(pool=MGCrP(heads=2, m=4, n=3, centering="channel", bn_relu=True),
                                      z0="last_token"),
    "concat": SecondOrderHead(fusion="concat", pool=MGCrP(heads=1, m=5, n=5, centering="none")),
}


@settings(max_examples=6, deadline=None)
@given(name=st.sampled_from(sorted(MASKED_HEADS)), lengths=st.lists(st.integers(2, 9), min_size=1, max_size=3),
       extra=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_the_masked_head_does_not_depend_on_padding(name, lengths, extra, seed):
    """The same sequences padded to different widths (and each alone): equal logits to 1e-10 in float64, in eval
    (BatchNorm on running statistics) and in training without dropout (BatchNorm statistics of the real word
    tokens alone)."""
    head = MASKED_HEADS[name]
    causal = head.z0 == "last_token"
    spec = text_body(head=attrs.evolve(head, drop=0.0), causal=causal)
    torch.manual_seed(seed)
    model = perturb(vspec.build(spec)).double().eval()
    ids, mask = batch(lengths, max(lengths), seed=seed)
    wide, wide_mask = batch(lengths, max(lengths) + extra, seed=seed)
    wide[:, :max(lengths)], wide_mask[:, :max(lengths)] = ids, mask
    wide[:, max(lengths):], wide_mask[:, max(lengths):] = 0, 0
    with torch.no_grad():
        assert alone_vs_padded(model, wide, wide_mask) < 1e-10
        model.train()
        narrow_logits, wide_logits = model(ids, attention_mask=mask), model(wide, attention_mask=wide_mask)
    assert (narrow_logits - wide_logits).abs().max().item() < 1e-10


def test_the_released_head_includes_padding_and_the_masked_one_does_not():
    """padding = included pools every position after the first: more padding changes the logits (as the
    released head, which always saw 128 tokens); masked does not."""
    included = SecondOrderHead(pool=MGCrP(heads=1, m=6, n=4, centering="channel", bn_relu=True),
                               norm=SvPN(side="left"), padding="included")
    logits = {}
    for padding in ("included", "masked"):
        torch.manual_seed(0)
        model = perturb(vspec.build(text_body(head=attrs.evolve(included, padding=padding)))).double().eval()
        ids, mask = batch([5, 7], 8)
        more, more_mask = batch([5, 7], 12)
        more[:, :8], more_mask[:, :8] = ids, mask
        with torch.no_grad():
            logits[padding] = (model(ids, attention_mask=mask) - model(more, attention_mask=more_mask)).abs().max()
    assert logits["masked"] < 1e-10 < 1e-3 < logits["included"]


def test_gpt_form_reads_the_last_real_token_as_z0():
    """z0 = last_token: the first-order term is the last real token (right or left padding), the word tokens
    the others: equal to the head applied by hand to each sequence's real tokens."""
    head = SecondOrderHead(pool=MGCrP(heads=1, m=4, n=3, centering="channel"), z0="last_token")
    torch.manual_seed(1)
    model = perturb(vspec.build(text_body(head=head, causal=True))).double().eval()
    for pad in ("right", "left"):
        ids, mask = batch([4, 9, 6], 9, pad=pad, seed=3)
        with torch.no_grad():
            hidden = model.forward_features(ids, attention_mask=mask)
            logits = model.forward_head(hidden, mask=mask.bool())
            for i in range(3):
                real = hidden[i][mask[i].bool()]
                z0, words = real[-1:], real[:-1]
                m = model.head
                q = m.pool(words[None])
                expect = m.cls_fc(z0) + m.word_fc(m.norm(q).flatten(1))
                assert (expect[0] - logits[i]).abs().max().item() < 1e-12


def test_second_order_heads_on_text_are_checked_by_field():
    with pytest.raises(SpecError) as info:  # the released pooling goes with the released z0, the first token
        SecondOrderHead(z0="last_token", padding="included")
    assert info.value.path == "SecondOrderHead.padding"
    text_body(head=SecondOrderHead(pool=MGCrP(heads=1, m=2, n=2)))  # a text body's first token is its class token
    with pytest.raises(SpecError) as info:  # one word token besides [CLS]
        attrs.evolve(text_body(head=SecondOrderHead(pool=MGCrP(heads=1, m=2, n=2))),
                     embedder=TokenEmbed(vocab_size=VOCAB, max_positions=16, seq_len=2))
    assert info.value.path == "head.pool" and "1 word token" in info.value.message
    with pytest.raises(SpecError) as info:  # an image has no last real token
        attrs.evolve(vspec.load_spec("specs/sot_tiny.py"), head=SecondOrderHead(z0="last_token"))
    assert info.value.path == "head.z0"


def test_svpn_started_on_the_left_is_svpn_of_the_transpose():
    """side = left: the power iteration starts from an m-vector (the released language head); the result is
    svPN of Q^T started on the right, transposed (written out in released_head above, checked by the fixture)."""
    from vspec.models.sot.ops import svpn_approx

    g = torch.Generator().manual_seed(0)
    q, w = torch.randn(5, 6, 4, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64)
    ctx_model = vspec.build(text_body(head=SecondOrderHead(pool=MGCrP(heads=1, m=6, n=4),
                                                           norm=SvPN(side="left")))).double()
    norm = ctx_model.head.norm
    assert norm.v0.shape == (6,)
    with torch.no_grad():
        norm.v0.copy_(w)
        got = norm(q[:, None])[:, 0]
    expect = svpn_approx(q.mT, alpha=0.5, v0=w, eps=1e-5, released_form=True).mT
    assert (got - expect).abs().max().item() < 1e-12
    assert not math.isclose((got - svpn_approx(q, alpha=0.5, eps=1e-5, released_form=True)).abs().max().item(), 0)


# ---------------------------------------------------------------- refiner attention on text
REFINES = [Refine(expansion=3, kernel=3), Refine(expansion=2, kernel=5, constraint="row_col"),
           Refine(expansion=1, kernel=3, reduction=False), Refine(expansion=1, kernel=3, expand=False, reduction=False)]


@settings(max_examples=8, deadline=None)
@given(refine=st.sampled_from(REFINES), causal=st.booleans(),
       lengths=st.lists(st.integers(1, 12), min_size=1, max_size=3), seed=st.integers(0, 2**16))
def test_refiner_attention_gives_a_padded_sequence_what_it_gets_alone(refine, causal, lengths, seed):
    """Maps masked by m_i m_j before the DLA and by m_j after it: every right-padded sequence's logits equal those
    of its real tokens alone, to 1e-10 in float64 (bidirectional and causal), and in a causal body every left-padded
    one's too (its positions counted over the real tokens; a bidirectional body's first token is its class token,
    so it is padded on the right)."""
    spec = text_body(attention=RefinerAttention(heads=4, refine=refine), causal=causal)
    torch.manual_seed(seed)
    model = perturb(vspec.build(spec), seed).double().eval()
    ids, mask = batch(lengths, LENGTH, seed=seed)
    with torch.no_grad():
        assert alone_vs_padded(model, ids, mask) < 1e-10
    left, left_mask = batch(lengths, LENGTH, pad="left", seed=seed)  # finite where a causal token has no real key
    with torch.no_grad():
        assert torch.isfinite(model(left, attention_mask=left_mask)).all()
        assert not causal or alone_vs_padded(model, left, left_mask) < 1e-10


def test_refiner_blocks_that_add_or_reuse_maps_honour_padding():
    """Refined-ViT's pattern on text (a compute block adding the incoming maps, a block reusing them)."""
    blocks = (PostNormBlock(attention=RefinerAttention(heads=4, refine=Refine())),
              PostNormBlock(attention=RefinerAttention(heads=4, add_incoming=True, refine=Refine())),
              PostNormBlock(attention=RefinerAttention(heads=4, reuse=True)))
    spec = attrs.evolve(text_body(), block=blocks, depth=3)
    model = perturb(vspec.build(spec)).double().eval()
    ids, mask = batch([3, 12, 7], LENGTH, seed=5)
    with torch.no_grad():
        assert alone_vs_padded(model, ids, mask) < 1e-10


@pytest.mark.parametrize("refine", REFINES[:2], ids=["none", "row_col"])
def test_causal_refiner_attention_lets_no_later_token_reach_an_earlier_one(refine):
    """The causal DLA reads rows i - k + 1 .. i: token i's output is the same whatever follows it; the centred DLA
    of a bidirectional body would read row i + 1."""
    spec = text_body(attention=RefinerAttention(heads=4, refine=refine), causal=True)
    model = perturb(vspec.build(spec)).double().eval()
    ids, _ = batch([LENGTH], LENGTH, seed=7)
    changed = ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % VOCAB + 1
    with torch.no_grad():
        a, b = model.forward_features(ids), model.forward_features(changed)
        assert (a[:, :6] - b[:, :6]).abs().max().item() < 1e-12
        assert (a[:, 6:] - b[:, 6:]).abs().max().item() > 1e-3
        bidirectional = perturb(vspec.build(attrs.evolve(spec, causal=False, head=FirstTokenHead()))).double().eval()
        c, d = bidirectional.forward_features(ids), bidirectional.forward_features(changed)
        assert (c[:, :6] - d[:, :6]).abs().max().item() > 1e-3


def test_refiner_attention_on_text_is_refused_where_it_cannot_mask():
    for refine, path in [(Refine(form="released"), "block.attention.refine.form"),
                         (Refine(constraint="spatial"), "block.attention.refine.constraint")]:
        with pytest.raises(SpecError) as info:
            text_body(attention=RefinerAttention(heads=4, refine=refine))
        assert info.value.path == path


# ---------------------------------------------------------------- presets
SOT_PRESETS = {  # preset -> (body preset, q, k, labels, dropout): SoT Table 6 and supplement Table S-4
    "bert_base_sot_cola": ("bert_base", 96, 48, 2, 0.5), "bert_base_sot_rte": ("bert_base", 56, 32, 2, 0.8),
    "bert_base_sot_mnli": ("bert_base", 112, 48, 3, 0.7), "bert_base_sot_qnli": ("bert_base", 112, 48, 2, 0.5),
    "bert_large_sot": ("bert_large", 64, 64, 2, 0.5), "spanbert_base_sot": ("spanbert_base", 64, 64, 2, 0.5),
    "roberta_base_sot": ("roberta_base", 64, 64, 2, 0.5), "roberta_large_sot": ("roberta_large", 64, 64, 2, 0.5),
    "gpt_sot": ("gpt", 64, 64, 2, 0.5),
}


def n_params(spec: Model) -> int:
    return sum(p.numel() for p in vspec.build(spec, "meta").parameters())


@pytest.mark.parametrize("name", sorted(SOT_PRESETS))
def test_sot_language_presets_are_their_body_with_the_forks_head(name):
    """The body's parameters less its own head, plus the fork's head layer by layer: cls_fc (d -> C), the two
    1x1 convolutions (d -> q, d -> k) and their BatchNorms, the start vector (q) and visual_fc (q k -> C)."""
    body, q, k, labels, drop = SOT_PRESETS[name]
    spec, base = (vspec.load_spec(f"specs/{n}.py") for n in (name, body))
    assert spec.head.drop == drop and spec.head.pool.m == q and spec.head.pool.n == k and spec.num_classes == labels
    assert spec.head.z0 == ("last_token" if body == "gpt" else None) and spec.head.padding == "masked"
    base = attrs.evolve(base, num_classes=labels)
    d = base.dim
    head = sum(p.numel() for p in vspec.build(base, "meta").head.parameters())
    fork = (d * labels + labels) + (q + k) * d + 2 * (q + k) + q + (q * k * labels + labels)
    assert n_params(spec) == n_params(base) - head + fork


def test_electra_small_refiner_adds_the_refiners_weights_alone():
    """Refiner Table 6: 14 M with or without the refiner. Per block: expansion 4 -> 12 maps (48), a 3 x 3
    depth-wise DLA on 12 maps (108), reduction 12 -> 4 (48)."""
    spec, base = (vspec.load_spec(f"specs/{n}.py") for n in ("electra_small_refiner", "electra_small"))
    assert n_params(spec) == n_params(base) + 12 * (48 + 108 + 48)
    assert round(n_params(spec) / 1e6) == 14
