"""Hypothesis strategies for T2T-ViT's kind (found by tests/helpers/strategies.py as the family is): `KIND_MODELS`,
small models using it with its options drawn; `KIND_RULES`, the rules tying it to the rest of a model that a change
of its fields breaks."""

import attrs
from hypothesis import strategies as st

from tests.helpers.strategies import drops, isotropic_model
from vspec.spec import T2TEmbed

KIND_MODELS = {
    T2TEmbed: st.builds(T2TEmbed, token_dim=st.integers(2, 6), block=st.sampled_from(["performer", "transformer"]))
    .flatmap(lambda e: st.builds(lambda r, d: attrs.evolve(e, kernel_ratio=r, drop=d), st.sampled_from([0.5, 1.0]),
                                 drops()) if e.block == "performer" else st.just(e))
    .map(lambda e: isotropic_model(embedder=e, img_size=(16, 32))),
}


def _t2t_rules(spec):
    """Not a multiple of 16; widths of zero or past the largest size."""
    h, w = spec.img_size
    return [([("img_size", [h + 16 + 1, w])], "embedder"),
            ([("embedder.token_dim", 2**30)], "embedder.token_dim"),
            ([("embedder.block", "performer"), ("embedder.kernel_ratio", 0.01)], "embedder.kernel_ratio"),
            ([("in_chans", 2**26)], "embedder")]


KIND_RULES = {T2TEmbed: _t2t_rules}
