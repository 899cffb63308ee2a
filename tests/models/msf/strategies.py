"""Hypothesis strategies for MSF's kinds (found by tests/helpers/strategies.py as the family is): `KIND_MODELS`,
small models using each kind with its options drawn; `KIND_RULES`, the rules tying each kind to the rest of a model
that a change of its fields breaks."""

from hypothesis import strategies as st

from tests.helpers.strategies import (
    TABLE1,
    TABLE2,
    attention_rules,
    attentions,
    component_paths,
    hierarchical_model,
    isotropic_model,
    projections,
    window_attentions,
)
from vspec.spec import Block, MeanShiftAttention, WindowMeanShiftAttention


@st.composite
def mean_shift_attentions(draw, dim: int, grid: tuple[int, int] | None = None):
    """MeanShiftAttention, or with a token `grid` WindowMeanShiftAttention, with a form and a tying."""
    a = draw(attentions(dim, tied=False) if grid is None else window_attentions(dim, grid))
    form = draw(st.sampled_from(("eq12", "eq14", "gauss_orig")))
    rows = TABLE2 if form == "gauss_orig" else TABLE1
    if form == "eq14":  # P~ is a matrix of its own
        rows = tuple(r for r in rows if r[3] == "P" and r.count("P") == 1)
    if form == "eq12":  # QUERY = KEY and VALUE = PROBE: a mean shift, blind to a shift of all tokens (the norm's
        rows = tuple(r for r in rows if r[0] != r[1] or r[2] != r[3])  # bias before it would never learn)
    fields = dict(heads=a.heads, head_dim=a.head_dim, qkv_bias=a.qkv_bias, proj_bias=a.proj_bias, scale=a.scale,
                  attn_drop=a.attn_drop, proj_drop=a.proj_drop, form=form,
                  projections=draw(projections(rows, dim, a.inner_dim(dim))))
    if grid is None:
        return MeanShiftAttention(**fields)
    return WindowMeanShiftAttention(**fields, window=a.window, shift=a.shift)


KIND_MODELS = {
    MeanShiftAttention: mean_shift_attentions(16).map(lambda a: isotropic_model(block=Block(attention=a))),
    # a window of 1 token is refused (KIND_RULES: nothing to attend)
    WindowMeanShiftAttention: mean_shift_attentions(16, (4, 4)).filter(lambda a: a.window > 1)
    .map(lambda a: hierarchical_model(Block(attention=a))),
}


def _mean_shift_rules(cls):
    def rules(spec):  # groups or roles that do not fit
        path = component_paths(spec, cls)[0]
        proj = f"{path}.projections"
        return attention_rules(cls)(spec) + [
            ([(f"{path}.heads", 1), (f"{path}.head_dim", 3), (f"{proj}.groups", 2)], f"{proj}.groups"),
            ([(f"{proj}.groups", 3)], f"{proj}.groups"),
            ([(f"{path}.form", "gauss_orig"), (f"{proj}.roles", "QKVPW")], f"{proj}.roles"),
            ([(f"{path}.form", "eq12"), (f"{proj}.roles", "QKVW")], f"{proj}.roles"),
            ([(f"{path}.form", "eq14"), (f"{proj}.roles", "QKVPP")], f"{proj}.roles"),
            ([(f"{proj}.roles", "QKPVW")], f"{proj}.roles"),
            ([(f"{proj}.roles", "KKVPW")], f"{proj}.roles"),
            ([(f"{proj}.grouping", "shuffled")], f"{proj}.grouping")]
    return rules


KIND_RULES = {MeanShiftAttention: _mean_shift_rules(MeanShiftAttention),
              WindowMeanShiftAttention: _mean_shift_rules(WindowMeanShiftAttention)}
