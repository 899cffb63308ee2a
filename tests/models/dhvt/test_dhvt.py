"""DHVT: released checkpoints reproduced, released sizes, each part against its equation, every
ablation row as a spec, and the parts composed with the other kinds."""

from pathlib import Path

import attrs
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import vspec
import vspec.models.dhvt.convert
import vspec.models.dhvt.modules
from tests.helpers.checks import FIXTURES, argument_cases, assert_close_to_stored, check_argument
from tests.helpers.docs_examples import doc
from vspec.convert import from_official
from vspec.nn.head_outputs import as_outputs, head_loss
from vspec.spec import DAFF, MLP, SOPE, Block, HeadTokenBlock, HeadTokens, SecondOrderHead

ROOT = Path(__file__).resolve().parents[3]

# released code: total params (M); MACs without attention matmuls (G, the paper's convention)
RELEASED = {
    "dhvt_tiny_cifar_p4": (6.009, 0.370), "dhvt_tiny_cifar_p2": (5.845, 1.409),
    "dhvt_small_cifar_p4": (23.425, 1.489), "dhvt_small_cifar_p2": (22.767, 5.582),
    "dhvt_tiny_imagenet": (6.267, 1.185), "dhvt_small_imagenet": (24.041, 4.682),
}
BASE = ROOT / "specs/dhvt_tiny_cifar_p4.py"


@pytest.mark.parametrize("name", ["dhvt_p4", "dhvt_p2", "dhvt_p16"])
def test_released_checkpoints_reproduced(name):
    data = torch.load(FIXTURES / f"{name}.pt", weights_only=True)
    model = from_official("dhvt", data["state_dict"], data["config"]).eval()
    with torch.no_grad():
        assert_close_to_stored(model(data["x"]), data["y"])



# VisionTransformer.__init__'s arguments (ArieSeirack/DHVT @ a86feda, vision_transformer.py)
DHVT_CONSTRUCTOR = (
    "img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth", "num_heads", "mlp_ratio", "qkv_bias",
    "representation_size", "distilled", "drop_rate", "attn_drop_rate", "drop_path_rate", "embed_layer", "norm_layer",
    "act_layer", "weight_init", "apply_dhvt",
)


def dhvt_p4():
    return torch.load(FIXTURES / "dhvt_p4.pt", weights_only=True)  # 32 px, patch 4, dim 64, depth 2, 4 heads


def attentions(spec):
    return [b.attention for b in spec.stages[0].blocks]


def as_p4(spec):
    return spec == vspec.models.dhvt.convert.DHVT.spec_of(dhvt_p4()["config"])


# argument -> [(changes to dhvt_p4's config, the converted spec's expected property or the refusal's text)]
DHVT_CASES = {
    "img_size": [({"img_size": 64}, lambda s: s.img_size == (64, 64)), ({"img_size": [32, 32]}, as_p4),
                 ({"img_size": (32, 48)}, r"img_size \(32, 48\): DAFF lays the tokens on a square grid")],
    "patch_size": [({"patch_size": 2}, lambda s: s.embedder == SOPE(patch_size=2)),
                   ({"patch_size": 8}, r"patch_size 8: the released SOPE builds for patch 2, 4 and 16 only")],
    "in_chans": [({"in_chans": 3}, as_p4), ({"in_chans": 1}, r"in_chans 1: the released SOPE reads 3 channels")],
    "num_classes": [({"num_classes": 0}, lambda s: s.num_classes == 0)],
    "embed_dim": [({"embed_dim": 32}, lambda s: s.dim == 32 and s.block.ffn.hidden == 128)],
    "depth": [({"depth": 3}, lambda s: s.depth == 3)],
    "num_heads": [({"num_heads": 2}, lambda s: {a.heads for a in attentions(s)} == {2})],
    "mlp_ratio": [({"mlp_ratio": 2}, lambda s: s.block.ffn.hidden == 128)],
    "qkv_bias": [({"qkv_bias": False}, lambda s: {a.qkv_bias for a in attentions(s)} == {False})],
    "representation_size": [({"representation_size": 32}, r"representation_size 32: the pre-logits layer")],
    "distilled": [({"distilled": True}, r"distilled True: the released constructor cannot build it")],
    "drop_rate": [({"drop_rate": 0.1}, lambda s: {a.proj_drop for a in attentions(s)} == {0.1})],
    "attn_drop_rate": [({"attn_drop_rate": 0.1}, lambda s: {a.attn_drop for a in attentions(s)} == {0.1})],
    "drop_path_rate": [({"drop_path_rate": 0.1}, lambda s: s.drop_path == 0.1)],
    "embed_layer": [({"embed_layer": "<class 'vision_transformer.PatchEmbed'>"}, as_p4)],  # unread with apply_dhvt
    "norm_layer": [({"norm_layer": "LayerNorm"}, lambda s: s.block.norm.eps == 1e-5),
                   ({"norm_layer": "functools.partial(<class 'torch.nn.modules.normalization.LayerNorm'>, eps=1e-06)"},
                    as_p4),
                   ({"norm_layer": "RMSNorm"}, r"norm_layer 'RMSNorm': only LayerNorm")],
    "act_layer": [({"act_layer": "GELU"}, as_p4), ({"act_layer": "ReLU"}, r"act_layer 'ReLU': only GELU")],
    "weight_init": [({"weight_init": "jax"}, as_p4),
                    ({"weight_init": "xavier"}, r"weight_init 'xavier': the released constructor asserts one of")],
    "apply_dhvt": [({"apply_dhvt": True}, as_p4),
                   ({"apply_dhvt": False}, r"apply_dhvt False: the released constructor cannot build it")],
    "unknown keys": [({"qk_scale": 0.1}, r"unknown argument 'qk_scale'; the released constructor takes img_size, ")],
}


def test_the_dhvt_cases_cover_every_constructor_argument():
    assert tuple(vspec.models.dhvt.convert.DHVT.arguments) == DHVT_CONSTRUCTOR
    assert list(DHVT_CASES) == [*DHVT_CONSTRUCTOR, "unknown keys"]


@pytest.mark.parametrize(**argument_cases(DHVT_CASES))
def test_every_dhvt_argument_is_honoured_or_refused_by_name(changes, expect):
    config = {**dhvt_p4()["config"], **changes}
    check_argument("dhvt", "DHVT", dhvt_p4()["state_dict"], config, expect)


def test_dhvt_training_only_arguments_leave_the_eval_output_as_released():
    data = dhvt_p4()
    changes = {"drop_rate": 0.1, "attn_drop_rate": 0.1, "drop_path_rate": 0.1, "weight_init": "jax"}
    model = from_official("dhvt", data["state_dict"], {**data["config"], **changes}).eval()
    with torch.no_grad():
        assert_close_to_stored(model(data["x"]), data["y"])


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_released_sizes(name):
    params, macs = RELEASED[name]
    prof = vspec.profile(vspec.load_spec(ROOT / f"specs/{name}.py"))
    assert abs(prof.params / 1e6 - params) / params < 0.0005
    assert abs(prof.conventions["no_attention_matmuls"] / 1e9 - macs) / macs < 0.01
    assert prof.macs > prof.conventions["no_attention_matmuls"]  # full MACs beside them
    assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs


def tiny(**changes):
    """DHVT-T p4 shrunk: 2 blocks of width 32, 4 heads, 10 classes, 16 px."""
    return vspec.override(vspec.load_spec(BASE), {"depth": 2, "dim": 32, "num_classes": 10, "img_size": 16,
                                                  **changes})


@given(patch=st.sampled_from([2, 4, 8, 16]), h=st.integers(1, 4), w=st.integers(1, 4))
def test_sope_grid(patch, h, w):
    spec = vspec.override(tiny(), {"embedder.patch_size": patch, "img_size": [h * patch, w * patch]})
    model = vspec.build(spec).eval()
    with torch.no_grad():
        tokens = model.embedder(torch.randn(1, 3, h * patch, w * patch))
    assert spec.grid == (h, w) and tokens.shape == (1, h * w, 32)
    assert len([m for m in model.embedder.proj if isinstance(m, torch.nn.Sequential)]) == patch.bit_length() - 1


def test_daff_class_token_is_reweighted_by_the_se_weight():
    """Eq. 4-5 written out: W = Linear(GELU(Linear(mean of output patch tokens))), X_c' = X_c * W."""
    torch.manual_seed(0)
    model = vspec.build(tiny()).eval()
    daff = model.stages[0].blocks[0].ffn
    x = torch.randn(2, 1 + 16, 32)
    with torch.no_grad():
        out = daff(x)
        grid = x[:, 1:].transpose(1, 2).reshape(2, 32, 4, 4)
        h = F.gelu(daff.bn1(daff.conv1(grid)))
        h = h + F.gelu(daff.bn2(daff.conv2(h)))
        patches = daff.bn3(daff.conv3(h)).flatten(2).transpose(1, 2)
        mean = patches.mean(dim=1)
        weight = F.linear(F.gelu(F.linear(mean, daff.compress.weight, daff.compress.bias)),
                          daff.excitation.weight, daff.excitation.bias)
    assert torch.allclose(out[:, 0], x[:, 0] * weight, atol=1e-6)
    assert torch.allclose(out[:, 1:], patches, atol=1e-6)


def test_head_tokens_against_equations_6_7():
    torch.manual_seed(0)
    model = vspec.build(tiny()).eval()
    block = model.stages[0].blocks[0]
    ht_mod, attn = block.head_tokens, block.attn
    x = torch.randn(2, 17, 32)
    with torch.no_grad():
        got = ht_mod(attn, x)
        groups = x.reshape(2, 17, 4, 8).mean(dim=1)  # Average(Reshape(X)): (B, h, d)
        projected = F.linear(groups, ht_mod.proj.weight, ht_mod.proj.bias).reshape(2, 4, 4, 8)
        head = F.gelu(F.layer_norm(projected, (8,), ht_mod.norm.weight, ht_mod.norm.bias, 1e-5)).reshape(2, 4, 32)
        head = head + ht_mod.embed  # Eq. 6
        y = attn(torch.cat((x, head), dim=1))  # Eq. 7
        want = torch.cat((y[:, :1] + y[:, 17:].mean(dim=1, keepdim=True), y[:, 1:17]), dim=1)
    assert torch.allclose(got, want, atol=1e-6)


def test_without_head_tokens_the_block_is_an_ordinary_block():
    torch.manual_seed(0)
    spec = vspec.override(tiny(), {"block": "pre_norm"})  # the block kind without head tokens
    model = vspec.build(spec).eval()
    block = model.stages[0].blocks[0]
    assert not hasattr(block, "head_tokens") and not any("head_tokens" in k for k in block.state_dict())
    x = torch.randn(2, 17, 32)
    with torch.no_grad():
        h = x + block.attn(block.norm1(x))
        assert torch.allclose(block(x).x, h + block.ffn(block.norm2(h)), atol=1e-6)
        assert isinstance(block.ffn, vspec.models.dhvt.modules.DAFF)


# every ablation row of Tables 5, 6, 8, 9 and 11 as a spec (DeiT-T p4 baseline or DHVT-T p4)
NO_NORM = {"kind": "none"}
DEIT = {"embedder.kind": "patch", "embedder.patch_size": 4, "block.ffn.kind": "mlp", "block.kind": "pre_norm",
        "pos_embed": "learned"}
ABLATIONS = {
    # Table 5: Abs. PE / SOPE / DAFF
    "t5 pe": DEIT, "t5 -": {**DEIT, "pos_embed": "none"},
    "t5 pe sope": {**DEIT, "embedder.kind": "sope"}, "t5 sope": {**DEIT, "embedder.kind": "sope", "pos_embed": "none"},
    "t5 pe daff": {**DEIT, "block.ffn.kind": "daff"},
    "t5 daff": {**DEIT, "block.ffn.kind": "daff", "pos_embed": "none"},
    "t5 pe sope daff": {**DEIT, "embedder.kind": "sope", "block.ffn.kind": "daff"},
    "t5 sope daff": {**DEIT, "embedder.kind": "sope", "block.ffn.kind": "daff", "pos_embed": "none"},
    # Table 6: head tokens
    "t6 pe ht": {**DEIT, "block.kind": "head_tokens"}, "t6 dhvt": {},
    # Table 8: minor operations on ViT's FFN
    "t8 split cls": {**DEIT, "block.ffn": {"kind": "daff", "spatial": "none", "cls": "identity", "norm": NO_NORM}},
    "t8 agg on cls": {**DEIT, "block.ffn": {"kind": "daff", "spatial": "none", "cls": "reweight", "norm": NO_NORM}},
    "t8 avgpool": {**DEIT, "block.ffn": {"kind": "daff", "spatial": "avgpool", "cls": "identity", "norm": NO_NORM}},
    "t8 vit ffn as daff": {**DEIT, "block.ffn": {"kind": "daff", "spatial": "none", "cls": "identity", "norm": NO_NORM,
                                                 "split_cls": False}},
    # Table 9: DAFF variants; B.2.2: affines
    "t9 agg all": {"block.ffn.cls": "all"}, "t9 no shortcut": {"block.ffn.shortcut": False},
    "b22 no affine": {"embedder.pre_affine": False, "embedder.post_affine": False},
    # Table 11: BN / LN in SOPE - DAFF
    "t11 bn-ln": {"block.ffn.norm": "layernorm"}, "t11 ln-bn": {"embedder.norm": "layernorm"},
    "t11 ln-ln": {"embedder.norm": "layernorm", "block.ffn.norm": "layernorm"},
    # Eq. 2 taken literally: GELU after every SOPE unit
    "eq2 gelu every unit": {"embedder.act": "every"},
}


def train_one_step(spec):
    torch.manual_seed(0)
    model = vspec.build(spec).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 3, *spec.img_size), torch.arange(4) % spec.num_classes
    out = model(x)
    loss = head_loss(F.cross_entropy, out, y)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    opt.step()
    with torch.no_grad():
        after = model(x)
    assert all(torch.isfinite(o.logits).all() for o in as_outputs(after))
    return model


@pytest.mark.parametrize("row", sorted(ABLATIONS))
def test_every_ablation_row_builds_and_trains_one_step(row):
    spec = vspec.override(tiny(), ABLATIONS[row])
    train_one_step(spec)


def test_split_cls_false_is_the_plain_ffn_shape():
    with pytest.raises(vspec.SpecError, match="split_cls"):
        DAFF(split_cls=False)


@pytest.mark.parametrize("case", ["sope+daff+gap", "ht on simplevit", "sope+sot head", "daff on simplevit",
                                  "ht+daff on list blocks"])
def test_dhvt_parts_compose_with_other_kinds(case):
    simple = vspec.override(vspec.load_spec(ROOT / "specs/simplevit_s.py"),
                            {"depth": 2, "dim": 64, "img_size": 32, "num_classes": 10, "embedder.patch_size": 8,
                             "block.attention.heads": 2, "block.attention.head_dim": 32})
    if case == "sope+daff+gap":  # no class token: DAFF re-weights every token
        spec = vspec.override(tiny(), {"head": {"kind": "gap", "norm": {}}, "class_token": False,
                                       "block.ffn.cls": "all"})
    elif case == "ht on simplevit":
        spec = attrs.evolve(simple, block=HeadTokenBlock(attention=simple.block.attention, ffn=simple.block.ffn,
                                                         norm=simple.block.norm, head_tokens=HeadTokens()))
    elif case == "sope+sot head":
        spec = vspec.override(tiny(), {"head.kind": "second_order", "head.pool.m": 4, "head.pool.n": 4,
                                       "head.pool.heads": 2})
        assert isinstance(spec.head, SecondOrderHead)
    elif case == "daff on simplevit":  # no class token to re-weight; the grid comes from the context
        spec = attrs.evolve(simple, block=attrs.evolve(simple.block, ffn=DAFF(cls="identity")),
                            embedder=SOPE(patch_size=8))
    else:
        base = tiny()
        spec = attrs.evolve(base, block=(base.block, Block(attention=base.block.attention, ffn=MLP())))
    model = train_one_step(spec)
    prof = vspec.profile(spec)
    assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs
    assert prof.params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("changes,needle", [
    ({"class_token": False, "head.kind": "gap"}, "the model has none"),
    ({"head.kind": "gap"}, "gap head never reads"),
    ({"head.kind": "second_order", "head.z0": "mean_token"}, "second_order head never reads"),
])
def test_dead_class_token_reweighting_is_rejected(changes, needle):
    """DAFF's re-weighting of the class token with no class token, or in the last block before a head that
    never reads it: parameters that could only get zero gradients are refused at spec time."""
    with pytest.raises(vspec.SpecError) as info:
        vspec.override(tiny(), changes)
    assert info.value.path == "block.ffn.cls" and needle in info.value.message
    # cls = identity (or all) is what such a model means
    model = vspec.build(vspec.override(tiny(), {**changes, "block.ffn.cls": "identity"}))
    assert not any(".compress." in k or ".excitation." in k for k in model.state_dict())


def test_non_square_grid_reaches_daff():
    spec = vspec.override(tiny(), {"img_size": [16, 32]})
    model = vspec.build(spec).eval()
    assert model.stages[0].blocks[0].ffn.grid == (4, 8)
    with torch.no_grad():
        assert model(torch.randn(2, 3, 16, 32)).shape == (2, 10)


def test_readme_dhvt_table_holds_the_measurement():
    import re

    rows = re.findall(r"^\| (dhvt_\w+) \| ([\d.]+) M \| [\d.]+ M \| [\d.]+ M \| ([\d.]+) G \| [\d.]+ G \| [\d.]+ G \| "
                      r"([\d.]+) G \|$", doc("families/dhvt"), re.M)
    assert {r[0] for r in rows} == set(RELEASED)
    for name, params, no_attention, total in rows:
        prof = vspec.profile(vspec.load_spec(ROOT / f"specs/{name}.py"))
        assert params == f"{prof.params / 1e6:.3f}"
        assert no_attention == f"{prof.conventions['no_attention_matmuls'] / 1e9:.3f}"
        assert total == f"{prof.macs / 1e9:.3f}"
