"""Hypothesis strategies for SoT's kinds (found by tests/helpers/strategies.py as the family is): `KIND_MODELS`,
small models using each kind with its options drawn; `KIND_RULES`, the rules tying each kind to the rest of a model
that a change of its fields breaks."""

from hypothesis import strategies as st

from tests.helpers.strategies import drops, embedder_rules, isotropic_model, small_floats, text_model
from vspec.spec import (
    EPN,
    GCP,
    GAPPool,
    LearnableScale,
    MGCrP,
    NoNorm,
    ReprLayerNorm,
    SecondOrderHead,
    SoTEmbed,
    SvPN,
)


def text_second_order() -> st.SearchStrategy:
    """SoT's head on a text body: the released BERT head (padding included) or a masked one, its z0 the first or
    the last real token (GPT)."""
    pool = st.builds(MGCrP, heads=st.integers(1, 2), m=st.integers(2, 4), n=st.integers(2, 4),
                     centering=st.sampled_from(["none", "scalar", "channel"]), bn_relu=st.booleans())
    norm = st.builds(SvPN, side=st.sampled_from(["right", "left"]))
    masked = st.builds(SecondOrderHead, fusion=st.sampled_from(["sum", "concat", "late"]), pool=pool, norm=norm,
                       drop=drops(), z0=st.sampled_from([None, "last_token"]))
    released = st.builds(SecondOrderHead, pool=pool, norm=norm, drop=drops(), padding=st.just("included"))
    return st.one_of(masked, released).map(lambda h: text_model(head=h))


def _head(pool, norm):
    def centred(h):  # aggr_all over a channel-centred covariance cannot see the final norm's bias
        return h.fusion == "aggr_all" and (isinstance(h.pool, GCP) or getattr(h.pool, "centering", "") == "channel")

    return st.builds(SecondOrderHead, fusion=st.sampled_from(["sum", "concat", "aggr_all", "late"]), pool=pool,
                     norm=norm, drop=drops()).filter(lambda h: not centred(h)).map(lambda h: isotropic_model(head=h))


_MGCRP = st.builds(MGCrP, heads=st.integers(1, 2), m=st.integers(2, 4), n=st.integers(2, 4),
                   centering=st.sampled_from(["none", "scalar", "channel"]))

KIND_MODELS = {
    SoTEmbed: st.builds(SoTEmbed, block=st.sampled_from(["dense", "resnet", "inception", "nonlocal"]),
                        stem_dim=st.sampled_from([8, 16]), downsample_last=st.booleans())
    .map(lambda e: isotropic_model(embedder=e, img_size=2 * e.patch_size)),
    SecondOrderHead: st.one_of(_head(_MGCRP, st.just(SvPN())), text_second_order()),
    GAPPool: _head(st.just(GAPPool()), st.sampled_from([NoNorm(), EPN(), LearnableScale(), ReprLayerNorm()])),
    GCP: _head(st.builds(GCP, dim=st.integers(2, 6), iters=st.integers(1, 5)), st.just(NoNorm())),
    MGCrP: _head(_MGCRP, st.sampled_from([NoNorm(), EPN(), ReprLayerNorm()])),
    SvPN: _head(_MGCRP, st.one_of(  # the exact SVD takes alpha alone
        st.builds(SvPN, alpha=st.sampled_from([0.25, 0.5, 0.75]), method=st.just("approx"), num_sv=st.just(1),
                  iters=st.integers(1, 3), start=st.sampled_from(["learnable", "fixed"])),
        st.builds(SvPN, alpha=st.sampled_from([0.25, 0.5, 0.75]), method=st.just("exact")))),
    EPN: _head(_MGCRP, st.just(EPN())),
    LearnableScale: _head(st.just(GAPPool()), st.builds(LearnableScale, init=small_floats(0.1, 2.0))),
    ReprLayerNorm: _head(_MGCRP, st.builds(ReprLayerNorm, eps=small_floats(1e-7, 1e-3))),
    NoNorm: _head(_MGCRP, st.just(NoNorm())),
}


def _head_rules(extra):
    """Second-order heads: one word token gives a degenerate (cross-)covariance, then `extra(head)`."""
    def rules(spec):
        one_token = [] if isinstance(spec.head.pool, GAPPool) else [([("img_size", spec.embedder.patch_size)],
                                                                     "head.pool")]
        return one_token + extra(spec.head)
    return rules


def _embedder_rules(spec):
    return embedder_rules(spec) + [
        ([("embedder.block", "resnet"), ("embedder.large_output", True)], "embedder.large_output"),
        ([("embedder.block", "nonlocal"), ("img_size", spec.embedder.patch_size)], "embedder.block")]  # 1 position


_CONSTANT = [  # one value: EPN gives its sign, a LayerNorm 0 (of two values, their order)
    ([("head.pool", {"kind": "gcp", "dim": 1}), ("head.norm", {"kind": n})], "head.norm")
    for n in ("epn", "repr_layernorm")
] + [([("head.pool", {"kind": "mgcrp", "heads": 1, "m": 1, "n": 2}), ("head.norm", {"kind": "repr_layernorm"})],
      "head.norm")]

KIND_RULES = {
    SoTEmbed: _embedder_rules,
    SecondOrderHead: lambda spec: [  # on text: 1 word token besides z0; the released head's z0 is the first
        ([("embedder.seq_len", 2)], "head.pool"),
        ([("head.z0", "last_token"), ("head.padding", "included")], "head.padding")] if spec.embedder.text
    else _head_rules(lambda h: [
        ([("class_token", False), ("head.fusion", "sum"), ("head.z0", None)], "head"),
        ([("head.fusion", "aggr_all"), ("head.z0", "mean_token")], "head.z0"),
        ([("head.z0", "last_token"), ("head.fusion", "sum")], "head.z0")])(spec),
    GAPPool: _head_rules(lambda h: [([("head.norm", {"kind": "svpn"})], "head.norm")]),
    GCP: _head_rules(lambda h: [([("head.pool.dim", 2**16 + 1)], "head.pool"), *_CONSTANT]),
    MGCrP: _head_rules(lambda h: [([("head.pool.heads", 2**11), ("head.pool.m", 2**11), ("head.pool.n", 2**11)],
                                   "head.pool"), *_CONSTANT]),
    SvPN: _head_rules(lambda h: [
        ([("head.norm.num_sv", min(h.pool.m, h.pool.n) + 1), ("head.norm.method", "approx")], "head.norm.num_sv"),
        *[([("head.norm", {"kind": "svpn", "method": "exact", k: v})], f"head.norm.{k}")  # approx's options
          for k, v in (("num_sv", 2), ("iters", 3), ("start", "fixed"), ("eps", 0.0))]]),
    EPN: _head_rules(lambda h: _CONSTANT[:1]),
    ReprLayerNorm: _head_rules(lambda h: _CONSTANT[1:]),
    LearnableScale: _head_rules(lambda h: [([("head.norm.init", 0.0)], "head.norm.init")]),
    NoNorm: _head_rules(lambda h: [([("head.norm.eps", 1e-5)], "head.norm.eps")]),
}
