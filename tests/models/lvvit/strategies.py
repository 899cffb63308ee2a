"""Hypothesis strategies for LV-ViT's kind (found by tests/helpers/strategies.py as the family is): `KIND_MODELS`,
small models using it with its options drawn; `KIND_RULES`, the rules tying it to the rest of a model that a change
of its fields breaks."""

from hypothesis import strategies as st

from tests.helpers.strategies import attentions, isotropic_model, norms
from vspec.spec import RescaledBlock

KIND_MODELS = {
    # LV-ViT's block: the residual branches divided by skip_lam (1: the plain pre-norm block)
    RescaledBlock: st.builds(RescaledBlock, attention=attentions(16), norm=norms(),
                             skip_lam=st.sampled_from([0.5, 1.0, 2.0, 3.0])).map(lambda b: isotropic_model(block=b)),
}

KIND_RULES = {
    RescaledBlock: lambda spec: [([("block.skip_lam", 0.0)], "block.skip_lam"),
                                 ([("block.skip_lam", -2.0)], "block.skip_lam")],
}
