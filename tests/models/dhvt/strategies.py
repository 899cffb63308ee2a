"""Hypothesis strategies for DHVT's kinds (found by tests/helpers/strategies.py as the family is): `KIND_MODELS`,
small models using each kind with its options drawn; `KIND_RULES`, the rules tying each kind to the rest of a model
that a change of its fields breaks."""

from hypothesis import strategies as st

from tests.helpers.strategies import component_paths, embedder_rules, ffn_rules, isotropic_model, norms
from vspec.spec import DAFF, MHSA, SOPE, Block, ClassTokenHead, GAPHead, HeadTokenBlock, HeadTokens

_DAFF = st.builds(DAFF, ratio=st.sampled_from([1.0, 2.0]), kernel=st.sampled_from([1, 3, 5]),
                  spatial=st.sampled_from(["dwconv", "avgpool", "none"]), shortcut=st.booleans(),
                  cls=st.sampled_from(["reweight", "identity", "all"]), norm=norms(), se_reduction=st.integers(1, 8))

KIND_MODELS = {
    SOPE: st.builds(SOPE, patch_size=st.sampled_from([2, 4, 8, 16]), pre_affine=st.booleans(),
                    post_affine=st.booleans(), norm=norms(), act=st.sampled_from(["released", "every"]))
    .map(lambda e: isotropic_model(embedder=e, img_size=max(16, e.patch_size))),
    # the class-token head reads what DAFF does to the class token; with cls = identity only the patch
    # tokens change, so a head that reads them
    DAFF: _DAFF.map(lambda f: isotropic_model(block=Block(attention=MHSA(heads=2), ffn=f),
                                              head=GAPHead() if f.cls == "identity" else ClassTokenHead())),
    HeadTokenBlock: st.builds(HeadTokens, norm=norms()).map(
        lambda t: isotropic_model(block=HeadTokenBlock(attention=MHSA(heads=2), head_tokens=t))),
}


def _sope_rules(spec):
    p = spec.embedder.patch_size
    if p <= 2:
        return embedder_rules(spec)
    # the first of log2(p) units: dim / 2^(units - 1) < 1 channel
    return embedder_rules(spec) + [([("dim", p // 2 - 1), ("block.attention.heads", 1)], "embedder.patch_size")]


def _daff_rules(spec):
    path = component_paths(spec, DAFF)[0]
    out = ffn_rules(DAFF)(spec) + [([(f"{path}.kernel", 4)], f"{path}.kernel"),
                                   ([(f"{path}.split_cls", False), (f"{path}.spatial", "dwconv")], f"{path}.split_cls")]
    if spec.block.ffn.cls != "identity":  # the re-weighting's hidden width dim // se_reduction is 0
        out.append(([(f"{path}.se_reduction", spec.dim + 1)], f"{path}.se_reduction"))
    return out


KIND_RULES = {
    SOPE: _sope_rules,
    DAFF: _daff_rules,
    HeadTokenBlock: lambda spec: [  # one channel group per attention head; extra tokens need global attention
        ([("block.attention.heads", 3), ("block.attention.head_dim", 4)], "block.head_tokens"),
        ([("block.attention.kind", "window_mhsa"), ("class_token", False), ("head", {"kind": "gap"})],
         "block.head_tokens")],
}
