"""Projection roles (MSF's QUERY KEY VALUE PROBE WEIGHT) are declared once: the role letters are one
constant, each attention kind declares the width of every input role (`role_widths`) and of a PROBE of its
own (`probe_width`), and the modules read those declarations (the size guard counts the built model) instead
of probing a kind's other fields."""

from typing import ClassVar

import attrs
import pytest
import torch

from vspec.compiler import build_component, context, modules
from vspec.nn.layers import RoleProjections
from vspec.spec import (
    MHSA,
    Block,
    IRPEAttention,
    MeanShiftAttention,
    Model,
    PatchEmbed,
    Projections,
    Refine,
    RefinerAttention,
    WindowMeanShiftAttention,
    WindowMHSA,
)
from vspec.spec.kinds import unregister
from vspec.spec.vit import MultiHead

DIM, HEADS, HEAD_DIM = 16, 2, 4  # inner width 8, half of dim: a dim-wide PROBE (Eq. 14's P~) stands out
PROJ = Projections()
SMALL = dict(heads=HEADS, head_dim=HEAD_DIM)
QKV = {"Q": 8, "K": 8, "V": 8}

# (attention, the width of each input role written out by hand)
CASES = [
    (MHSA(**SMALL), QKV),
    (MHSA(**SMALL, projections=PROJ), QKV),
    (MHSA(**SMALL, projections=Projections(roles="QKQW", groups=2)), QKV),
    (WindowMHSA(**SMALL, window=2), QKV),
    (WindowMHSA(**SMALL, window=2, projections=PROJ), QKV),
    (MeanShiftAttention(**SMALL), QKV | {"P": 8}),
    (MeanShiftAttention(**SMALL, form="eq14"), QKV | {"P": 16}),
    (MeanShiftAttention(**SMALL, form="eq14", projections=Projections(roles="QKKPW", groups=2)), QKV | {"P": 16}),
    (MeanShiftAttention(**SMALL, form="gauss_orig"), QKV),
    (WindowMeanShiftAttention(**SMALL, window=2), QKV | {"P": 8}),
    (WindowMeanShiftAttention(**SMALL, window=2, form="eq14"), QKV | {"P": 16}),
    (WindowMeanShiftAttention(**SMALL, window=2, form="gauss_orig"), QKV),
    (RefinerAttention(**SMALL), QKV),
    (RefinerAttention(**SMALL, form="released"), QKV),
    (RefinerAttention(**SMALL, refine=Refine(expansion=3, reduction=False)), {"Q": 8, "K": 8, "V": 24}),
    (RefinerAttention(**SMALL, reuse=True), {"V": 8}),
    (IRPEAttention(**SMALL), QKV),
    (IRPEAttention(**SMALL, on="qkv", projections=Projections(roles="QKQW", groups=2)), QKV),
]
ATTENTIONS = sorted((c for c in modules() if issubclass(c, MultiHead)), key=lambda c: c.__name__)


MODEL = Model(embedder=PatchEmbed(patch_size=4), block=Block(attention=MHSA(**SMALL)), depth=1, dim=DIM,
              num_classes=3, img_size=16)  # a 4x4 grid and a class token at width DIM


def attention_module(attention):
    """The module of one attention in MODEL's place."""
    torch.manual_seed(0)
    return build_component(attention, context(MODEL))


def built_widths(module) -> list[int]:
    """The width of each input role the built module projects a token to, read off its outputs."""
    x = torch.randn(1, 3, DIM)
    if isinstance(getattr(module, "projections", None), RoleProjections):
        return [y.shape[-1] for y in module.projections(x)]
    widths = getattr(module, "widths", None)  # refiner: one Linear split at its role widths
    y = module.qkv(x)
    if widths is None:  # the fused qkv, three equal roles
        return [y.shape[-1] // 3] * 3
    return [part.shape[-1] for part in y.split(widths, dim=-1)]


def test_every_attention_kind_is_in_the_table():
    assert {type(a) for a, _ in CASES} == set(ATTENTIONS), "an attention kind without a role-width case"


@pytest.mark.parametrize("attention,widths", CASES, ids=lambda v: getattr(v, "kind", None))
def test_declared_role_widths_are_the_built_modules(attention, widths):
    assert attention.role_widths(DIM) == widths
    assert built_widths(attention_module(attention)) == list(widths.values())
    assert attention.probe_width(DIM) == (DIM if widths.get("P") == DIM else None)


@attrs.frozen
class FormedMHSA(MHSA):
    """A generic attention whose own field `form` happens to read "eq14" (Refiner's attention and Refine have
    a field `form` too): nothing MSF's Eq. 14 does may apply to it."""

    kind: ClassVar[str] = "formed_mhsa"
    form: str = "eq14"


unregister(FormedMHSA)  # used as an object here, never through files: no other test should meet the kind


def test_a_form_field_of_another_kind_is_not_msf_eq14():
    attention = FormedMHSA(**SMALL, projections=PROJ)
    assert attention.probe_width(DIM) is None and attention.role_widths(DIM) == QKV
    formed = modules()[MHSA](attention, context(MODEL))  # the generic module, as a kind of its own would reuse it
    assert [y.shape[-1] for y in formed.projections(torch.randn(1, 3, DIM))] == [8, 8, 8]
    # as built: 3 input roles (8 x 16) + biases, WEIGHT (16 x 8) + bias
    assert 3 * (8 * 16 + 8) + 16 * 8 + 16 == sum(p.numel() for p in formed.parameters())


@pytest.mark.parametrize("form,probe", [("eq12", 8 * 16 + 8), ("eq14", 16 * 16 + 16), ("gauss_orig", 0)])
def test_the_size_guard_counts_msf_roles_as_built(form, probe):
    attention = MeanShiftAttention(**SMALL, form=form, projections=PROJ)
    assert sum(p.numel() for p in attention_module(attention).parameters()) == 3 * (8 * 16 + 8) + 16 * 8 + 16 + probe


def test_role_matrix_gives_each_roles_dense_matrix():
    """`role_matrix` (what `vspec analyze` reads): fused qkv / proj rows and columns; tied roles the shared
    matrix (a tied WEIGHT its transpose); grouped ones zero where an output channel reads no group."""
    fused = attention_module(MHSA(**SMALL))
    assert fused.projection_roles == "QKVW"
    for i, role in enumerate("QKV"):
        assert torch.equal(fused.role_matrix(role), fused.qkv.weight[8 * i:8 * (i + 1)])
    assert torch.equal(fused.role_matrix("W"), fused.proj.weight)
    tied = attention_module(MeanShiftAttention(**SMALL, projections=Projections(roles="QKKQK", groups=2)))
    assert tied.projection_roles == "QKVPW"
    q, k = tied.projections.matrices["Q"].weight, tied.projections.matrices["K"].weight  # (8, 16 / 2) each
    dense_k = torch.zeros(8, 16)
    for o in range(8):  # interleaved: output o reads group o mod 2, i.e. input channels 8 (o mod 2) + 0..7
        dense_k[o, 8 * (o % 2):8 * (o % 2) + 8] = k[o]
    assert torch.equal(tied.role_matrix("V"), dense_k) and torch.equal(tied.role_matrix("K"), dense_k)
    assert torch.equal(tied.role_matrix("P"), tied.role_matrix("Q")) and q.shape == (8, 8)
    assert torch.equal(tied.role_matrix("W"), dense_k.T)
