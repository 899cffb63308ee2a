"""Issue 11 (hardening), the spec language's part: no spec that validates builds a zero-sized layer or
a size torch cannot take, options that would do nothing are refused, and error lines stay short; issue 19:
nor one with attention over a single token. The
fuzz tests here draw models of every component kind (tests/helpers/strategies.py: KIND_MODELS) and break them."""

import json
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import vspec
from tests.helpers.breakages import apply_changes
from tests.helpers.checks import assert_every_parameter_learns
from tests.helpers.kinds import COMPONENTS
from tests.helpers.strategies import KIND_MODELS, kind_breakages, model_drafts
from vspec.nn.head_outputs import head_loss
from vspec.spec import (
    MHSA,
    Block,
    GAPHead,
    HeadTokenBlock,
    HeadTokens,
    MeanShiftAttention,
    Model,
    PatchEmbed,
    PatchMerging,
    Projections,
    Refine,
    RefinerAttention,
    SoTEmbed,
    SpecError,
    Stage,
    WindowMeanShiftAttention,
    WindowMHSA,
    from_dict,
    override,
    to_dict,
)
from vspec.spec.errors import show

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("cls", COMPONENTS, ids=lambda c: c.__name__)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_invalid_specs_of_every_kind_name_the_field(cls, data):
    """A random model using `cls`, broken at one of its fields or rules: from_dict and override both
    refuse it with a SpecError naming the field, in a short line."""
    spec = data.draw(KIND_MODELS[cls])
    changes, path = data.draw(kind_breakages(spec, cls))
    for make in (lambda: from_dict(apply_changes(to_dict(spec), changes)), lambda: override(spec, dict(changes))):
        with pytest.raises(SpecError) as info:
            make()
        assert info.value.path == path, f"{show(changes)}: expected {path!r}, got {info.value}"
        assert len(str(info.value)) < 400, str(info.value)


@pytest.mark.parametrize("cls", COMPONENTS, ids=lambda c: c.__name__)
@settings(max_examples=3, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_valid_specs_of_every_kind_train(cls, data, seed):
    """A random model using `cls` trains a few AdamW steps (train mode) with a finite loss and finite
    gradients, and afterwards every parameter still gets a nonzero gradient (eval mode: in train mode a
    bias before a BatchNorm rightly gets none)."""
    spec = data.draw(KIND_MODELS[cls])
    torch.manual_seed(seed)
    model = vspec.build(spec).train()
    assert all(p.numel() > 0 for p in model.parameters())  # no zero-sized layer
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = vspec.example_input(spec, 4), torch.randint(0, spec.num_classes, (4,))
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = head_loss(F.cross_entropy, out, y)  # every output the head declares (late fusion: two)
        assert torch.isfinite(loss), loss
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        opt.step()
    model.eval().double().zero_grad(set_to_none=True)  # float64: a gradient zero by an invariance stays ~1e-16,
    out = model(x.double() if x.is_floating_point() else x)  # a small real one (behind a small layer scale, at
    (out * torch.randn_like(out)).sum().backward()  # logits near 0: ~1e-8 of the largest) stands out
    assert_every_parameter_learns(model)


# ---------------------------------------------------------------------------------------------
# regression tests, one per defect of issue 11's spec items


def preset(name):
    return vspec.load_spec(ROOT / "specs" / f"{name}.py")


def refused(spec, changes, path, match=None):
    with pytest.raises(SpecError, match=match) as info:
        override(spec, changes)
    assert info.value.path == path, str(info.value)
    return info.value


def test_daff_se_reduction_beyond_the_width_is_refused():
    """Item 1: dim // se_reduction = 0 built a zero-width re-weighting ("cannot reshape tensor of 0 elements")."""
    refused(preset("demo_digits"), {"block.ffn.se_reduction": 128}, "block.ffn.se_reduction", "zero-sized")
    override(preset("demo_digits"), {"block.ffn.se_reduction": 96})  # a hidden width of 1 is a real layer


def test_sope_needs_a_channel_in_its_first_unit():
    """Item 2: SOPE's first of log2(P) units has dim / 2^(units - 1) channels; below 1 it built convolutions
    with 0 output channels. The refusal names the rule; the smallest width that has one builds."""
    spec = override(preset("dhvt_tiny_imagenet"), {"block.ffn.cls": "identity", "class_token": False,
                                                   "head": {"kind": "gap"}, "block.attention.heads": 1,
                                                   "block.kind": "pre_norm", "img_size": 32})
    refused(spec, {"dim": 7}, "embedder.patch_size", "dim must be >= 8")
    model = vspec.build(override(spec, {"dim": 8}))
    assert all(p.numel() > 0 for p in model.parameters())


def test_second_order_pools_need_two_word_tokens_with_any_fusion():
    """Item 3: aggr_all with a class token and one word token pooled two tokens and passed."""
    spec = preset("sot_7layer")
    one_word = {"img_size": 8, "embedder.kind": "patch", "embedder.patch_size": 8}
    for fusion in ("sum", "concat", "late", "aggr_all"):
        refused(spec, {**one_word, "head.fusion": fusion}, "head.pool", "at least 2 word tokens")


@pytest.mark.parametrize("pool, norm, path", [
    ({"kind": "gcp", "dim": 1}, {"kind": "epn"}, "head.norm"),
    ({"kind": "gcp", "dim": 1}, {"kind": "repr_layernorm"}, "head.norm"),
    ({"kind": "mgcrp", "heads": 1, "m": 1, "n": 2}, {"kind": "repr_layernorm"}, "head.norm"),
    ({"kind": "mgcrp", "heads": 1, "m": 1, "n": 1}, {"kind": "epn"}, "head.norm"),
    ({"kind": "mgcrp"}, {"kind": "svpn", "method": "exact", "iters": 3}, "head.norm.iters"),
    ({"kind": "mgcrp"}, {"kind": "svpn", "method": "exact", "start": "fixed"}, "head.norm.start"),
])
def test_options_that_do_nothing_are_refused(pool, norm, path):
    """Item 4: EPN of one value is its sign and a LayerNorm of one value 0 (of two, their order): the
    representation is constant; the exact SVD uses none of the power iteration's options."""
    refused(preset("deit_tiny_sot"), {"head.pool": pool, "head.norm": norm}, path)


def test_the_smallest_representations_that_vary_are_accepted():
    spec = preset("deit_tiny_sot")
    override(spec, {"head.pool": {"kind": "gcp", "dim": 1}, "head.norm": {"kind": "no_norm"}})
    override(spec, {"head.pool": {"kind": "mgcrp", "heads": 1, "m": 1, "n": 2}, "head.norm": {"kind": "epn"}})
    override(spec, {"head.pool": {"kind": "gcp", "dim": 2}, "head.norm": {"kind": "repr_layernorm"}})
    override(spec, {"head.norm": {"kind": "svpn", "method": "exact", "alpha": 0.25}})


@pytest.mark.parametrize("changes, path", [
    ({"dim": 10**40}, "dim"),
    ({"dim": 2**31}, "dim"),
    ({"num_classes": 2**63}, "num_classes"),
    ({"img_size": [2**31, 28]}, "img_size"),
    ({"block.ffn.ratio": 10**400}, "block.ffn.ratio"),  # an int no float holds
    ({"block.ffn.ratio": 1e300}, "block.ffn.ratio"),  # a finite float, an infinite hidden width
    ({"block.ffn.ratio": float("nan")}, "block.ffn.ratio"),
    ({"block.norm.eps": float("inf")}, "block.norm.eps"),
    ({"block.attention.scale": -float("inf")}, "block.attention.scale"),
    ({"block.attention.heads": 2**16, "block.attention.head_dim": 2**16}, "block.attention.head_dim"),
    ({"head": {"kind": "second_order", "pool": {"kind": "gcp", "dim": 2**16 + 1}, "norm": {"kind": "no_norm"}}},
     "head.pool"),
    ({"embedder": {"kind": "simple_patch", "patch_size": 2**16}, "img_size": 2**16}, "embedder.patch_size"),
    ({"embedder": {"kind": "patch", "patch_size": 1}, "img_size": 2**16}, "img_size"),  # 2**32 tokens
])
def test_sizes_and_floats_torch_cannot_take_are_refused(changes, path):
    """Item 6: integers past int64 passed validation and then torch raised TypeError; every size a spec
    gives or implies is now at most 2**31 - 1 and every float finite."""
    refused(preset("demo_digits"), changes, path)


def test_direct_construction_bounds_sizes_and_floats():
    from vspec.spec import MLP, LearnableScale, Model

    for make in (lambda: MLP(ratio=10**400), lambda: LearnableScale(init=10**400), lambda: MLP(hidden=2**31),
                 lambda: Model(dim=2**40)):
        with pytest.raises(SpecError, match="finite|<= 2147483647"):
            make()


@pytest.mark.parametrize("eps", [5e-324, 1e-46, 1e39, 0.0, -1e-6])
def test_a_norm_eps_float32_holds_as_zero_or_infinite_is_refused_everywhere(eps):
    """Issue 60, item 14: 5e-324 passed `> 0` and is 0 in float32, where LayerNorm and BatchNorm add it to the
    variance (a constant token: 0 / 0). One rule for every norm's eps: a spec's Norm, SoT's repr_layernorm,
    timm's bn_eps."""
    from vspec.spec import ReprLayerNorm

    single = torch.tensor(eps, dtype=torch.float32).item()  # torch's own rounding, the reference
    assert not 0 < single < float("inf")
    assert F.layer_norm(torch.ones(1, 4), (4,), eps=eps).isnan().all() == (single <= 0)
    refused(preset("demo_digits"), {"block.norm.eps": eps}, "block.norm.eps")
    with pytest.raises(SpecError, match=r"^ReprLayerNorm\.eps: "):
        ReprLayerNorm(eps=eps)
    with pytest.raises(SpecError, match=re.escape(f"bn_eps: {eps!r}: a BatchNorm eps must be")):
        vspec.create_model("lvvit_t", depth=1, bn_eps=eps)


def test_the_smallest_norm_eps_float32_holds_is_accepted():
    tiny = 2.0 ** -149  # float32's smallest positive (subnormal)
    assert torch.tensor(tiny, dtype=torch.float32).item() == tiny
    model = vspec.build(override(preset("demo_digits"), {"block.norm.eps": tiny, "depth": 1}))
    assert model.stages[0].blocks[0].norm1.eps == tiny
    assert F.layer_norm(torch.ones(1, 4), (4,), eps=tiny).isfinite().all()


def test_huge_ints_in_json_and_toml_are_spec_errors():
    """Python refuses to parse ints of more than 4300 digits (a ValueError, not a JSONDecodeError)."""
    with pytest.raises(SpecError, match="invalid JSON"):
        vspec.from_json('{"dim": ' + "9" * 5000 + "}")
    with pytest.raises(SpecError, match="invalid TOML"):
        vspec.from_toml("dim = " + "9" * 5000)


@pytest.mark.parametrize("make", [
    lambda big: override(preset("demo_digits"), {"head.kind": big}),
    lambda big: override(preset("demo_digits"), {big: 1}),
    lambda big: override(preset("demo_digits"), {"dim": big}),
    lambda big: override(preset("demo_digits"), {"block": [big]}),
    lambda big: override(preset("demo_digits"), {"head.norm": {"kind": big}}),
    lambda big: vspec.parse_assignment(big),
    lambda big: vspec.from_dict({**to_dict(preset("demo_digits")), big: 1}),
    lambda big: vspec.from_dict({**to_dict(preset("demo_digits")), "version": big}),
    lambda big: vspec.from_dict({**to_dict(preset("demo_digits")), "pos_embed": big}),
    lambda big: vspec.from_dict({**to_dict(preset("demo_digits")), "stages": big}),
    lambda big: vspec.from_dict({**to_dict(preset("demo_digits")), "version": 10**5000}),
    lambda big: vspec.from_json('{"dim": "' + big + '"}'),
], ids=range(12))
def test_long_values_are_cut_in_error_lines(make):
    """Item 10: a 1 MB value was echoed whole in the error line."""
    with pytest.raises(SpecError) as info:
        make("x" * 2**20)
    assert len(str(info.value)) < 400, str(info.value)[:500]


# ---------------------------------------------------------------------------------------------
# issue 19: specs that validate but can never learn. A softmax over one token is 1 whatever the scores,
# so an attention whose queries each see one token has query / key weights (and a relative position bias
# table, or SoT's nonlocal theta / phi) that only ever get zero gradients; and a `stages` list beside
# the one-stage shorthand was ignored.


def _one_stage(attention, img_size=16, head_tokens=None, class_token=False):
    return dict(embedder=PatchEmbed(patch_size=4), img_size=img_size, class_token=class_token, pos_embed="none",
                head=GAPHead(), num_classes=3,
                stages=[Stage(depth=1, dim=16, block=Block(attention=attention) if head_tokens is None else
                              HeadTokenBlock(attention=attention, head_tokens=head_tokens))])


def _two_stages(first, second, img_size=8):
    return dict(embedder=PatchEmbed(patch_size=4), img_size=img_size, class_token=False, head=GAPHead(),
                num_classes=3, stages=[Stage(depth=1, dim=16, block=Block(attention=first)),
                                       Stage(depth=1, dim=32, block=Block(attention=second), entry=PatchMerging())])


SINGLE_TOKEN_CASES = {  # model fields, the path the SpecError names, a word of its message
    "window of 1 (the issue's example)": (_one_stage(WindowMHSA(heads=2, window=1)), "block.attention.window",
                                          "1 token per window"),
    "window of 1 in a later stage": (_two_stages(WindowMHSA(heads=2, window=2), WindowMHSA(heads=2, window=1),
                                                 img_size=16), "stages.1.block.attention.window", "per window"),
    "window clamped to a 1x1 grid after merging": (_two_stages(WindowMHSA(heads=2, window=2),
                                                               WindowMHSA(heads=2, window=7)),
                                                   "stages.1.block.attention", "clamps the window"),
    "window mean shift clamped to a 1x1 grid": (_one_stage(WindowMeanShiftAttention(heads=2, window=7), img_size=4),
                                                "block.attention", "clamps the window"),
    "mhsa on a 1x1 grid after merging": (_two_stages(MHSA(heads=2), MHSA(heads=2)), "stages.1.block.attention",
                                         "nothing to attend"),
    "mhsa on a 1x1 grid": (_one_stage(MHSA(heads=2), img_size=4), "block.attention", "no class token"),
    "mean shift on a 1x1 grid": (_one_stage(MeanShiftAttention(heads=2, form="eq14"), img_size=4), "block.attention",
                                 "nothing to attend"),
    "refiner on a 1x1 grid": (_one_stage(RefinerAttention(heads=2, refine=Refine(kernel=1)), img_size=4),
                              "block.attention", "nothing to attend"),
    "sot nonlocal on a 1x1 grid": (dict(embedder=SoTEmbed(block="nonlocal", stem_dim=8), img_size=16, dim=16,
                                        block=Block(attention=MHSA(heads=2)), num_classes=3), "embedder.block",
                                   "theta / phi"),
}


@pytest.mark.parametrize("name", SINGLE_TOKEN_CASES)
def test_attention_over_one_token_is_refused(name):
    """Each of these validated, built and trained with weights that never learn (the 36 of 300 random
    compositions in issue 19); now the kind concerned refuses the shape it would see, in one line."""
    fields, path, word = SINGLE_TOKEN_CASES[name]
    with pytest.raises(SpecError) as info:
        Model(**fields)
    assert info.value.path == path and word in info.value.message, str(info.value)
    assert "\n" not in str(info.value) and len(str(info.value)) < 400


def test_attention_over_one_token_is_refused_from_json_and_override():
    """The same rule through the spec file forms and --set: the path runs from the model root."""
    fields = {"embedder": {"kind": "patch", "patch_size": 4}, "img_size": 16, "class_token": False,
              "head": {"kind": "gap"}, "pos_embed": "none", "num_classes": 3, "depth": 1, "dim": 16,
              "block": {"attention": {"kind": "window_mhsa", "heads": 2, "window": 1}}}
    with pytest.raises(SpecError, match=r"^block\.attention\.window: 1 token per window: nothing to attend"):
        vspec.from_json(json.dumps(fields))
    refused(preset("swin_tiny"), {"stages.3.block.attention.window": 1}, "stages.3.block.attention.window")
    refused(preset("sot_7layer"), {"embedder.block": "nonlocal", "img_size": 8}, "embedder.block")
    refused(preset("deit_tiny"), {"img_size": 16, "class_token": False, "head": {"kind": "gap"}}, "block.attention")


def _learns(spec, seed=0):
    torch.manual_seed(seed)
    model = vspec.build(spec).eval().double()
    with torch.no_grad():  # every parameter away from its init (a zero class token, say)
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    out = model(vspec.example_input(spec, 4, dtype=torch.float64))
    (out * torch.randn_like(out)).sum().backward()
    assert_every_parameter_learns(model)


@pytest.mark.parametrize("fields", [
    # one patch and the class token: 2 tokens (separate Q and K matrices, so that a dead one would show)
    _one_stage(MHSA(heads=2, projections=Projections()), img_size=4, class_token=True),
    # one patch and a head token per head (DHVT): 3 tokens
    _one_stage(MHSA(heads=2, projections=Projections()), img_size=4, head_tokens=HeadTokens()),
    _one_stage(MeanShiftAttention(heads=2), img_size=4, class_token=True),
    # windows of 1 x 2 tokens on a 1 x 4 grid
    _one_stage(WindowMeanShiftAttention(heads=2, window=2), img_size=(4, 16)),
], ids=["class token", "head tokens", "mean shift with class token", "window 1x2"])
def test_the_fewest_tokens_that_attend_are_accepted_and_learn(fields):
    _learns(Model(**fields))


@settings(max_examples=20, deadline=None)
@given(case=st.one_of(model_drafts(), model_drafts(single_token=True)))
def test_random_models_are_refused_exactly_where_one_token_is_attended(case):
    """The composition fuzz draws shapes that attend over one token (windows of 1, grids that shrink to
    1 x 1) instead of avoiding them: the spec refuses exactly those, naming the first such attention
    that the tests' own count (strategies.single_token_path) finds, and accepts the rest."""
    fields, path = case
    if path is None:
        Model(**fields)
        return
    with pytest.raises(SpecError) as info:
        Model(**fields)
    assert info.value.path == path, str(info.value)


@pytest.mark.parametrize("make", [
    lambda: vspec.from_dict({**to_dict(preset("demo_digits")), "stages": []}),
    lambda: vspec.from_json(json.dumps({**to_dict(preset("demo_digits")), "stages": []})),
    lambda: vspec.from_toml("stages = []\n" + vspec.to_toml(preset("demo_digits"))),
    lambda: Model(dim=16, block=Block(attention=MHSA(heads=2)), stages=[]),
])
def test_an_empty_stages_list_beside_the_shorthand_is_refused(make):
    """`"stages": []` next to block / depth / dim was silently ignored (the shorthand built the stage).
    (`--set stages=[]` on a one-stage model was already refused: an unknown key there.)"""
    with pytest.raises(SpecError) as info:
        make()
    assert info.value.path in ("stages", "Model.stages") and "shorthand" in info.value.message, str(info.value)
    assert "\n" not in str(info.value)
