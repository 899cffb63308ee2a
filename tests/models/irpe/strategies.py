"""Hypothesis strategies for iRPE's kind (found by tests/helpers/strategies.py as the family is): `KIND_MODELS`,
small models using it with its options drawn; `KIND_RULES`, the rules tying it to the rest of a model that a change
of its fields breaks."""

from hypothesis import strategies as st

from tests.helpers.strategies import attention_rules, component_paths, drops, hierarchical_model, isotropic_model
from vspec.spec import Block, GAPHead, HeadTokenBlock, IRPEAttention

# any places, shared or per-head tables, other piecewise coefficients; a class token or not, head tokens or not, one
# stage or two. The head reads the patch tokens: under a class-token head the last block's key table could not move
# the logits (the class token's row has one bucket; tests/models/irpe/test_irpe.py)
_IRPE = st.builds(IRPEAttention, heads=st.just(2), on=st.sampled_from(["q", "k", "v", "qk", "kv", "qkv"]),
                  shared_head=st.booleans(), alpha=st.sampled_from([1.0, 1.9]), beta=st.sampled_from([2.0, 3.8]),
                  gamma=st.sampled_from([8.0, 15.2]), qkv_bias=st.booleans(), attn_drop=drops())

KIND_MODELS = {
    IRPEAttention: st.one_of(
        st.tuples(_IRPE, st.booleans(), st.booleans()).map(lambda t: isotropic_model(
            block=HeadTokenBlock(attention=t[0]) if t[2] else Block(attention=t[0]), class_token=t[1],
            head=GAPHead())),
        _IRPE.map(lambda a: hierarchical_model(Block(attention=a)))),
}


def _irpe_rules(spec):
    path = component_paths(spec, IRPEAttention)[0]
    return attention_rules(IRPEAttention)(spec) + [  # Eq. 18 divides by ln(gamma / alpha); places are letters of qkv
        ([(f"{path}.alpha", 2.0), (f"{path}.gamma", 2.0)], f"{path}.gamma"),
        ([(f"{path}.alpha", 3.0), (f"{path}.beta", 2.0)], f"{path}.beta"),
        ([(f"{path}.on", "kk")], f"{path}.on")]


KIND_RULES = {IRPEAttention: _irpe_rules}
