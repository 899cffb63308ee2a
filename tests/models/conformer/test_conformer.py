"""Conformer: the released models reproduced (a two-branch body: a CNN map carried beside the tokens), every
constructor argument honoured or refused by name, the two-state block contract, and its rules."""

import re
from pathlib import Path

import attrs
import pytest
import torch
import torch.nn.functional as F

import vspec
from tests.helpers.checks import (
    FIXTURES,
    argument_cases,
    assert_close_to_stored,
    assert_every_parameter_learns,
    check_argument,
)
from tests.helpers.docs_examples import doc
from tests.models.conformer.strategies import conformer_model
from vspec.convert import from_official
from vspec.models.conformer.convert import CONFORMER
from vspec.nn.blocks import Carry
from vspec.nn.head_outputs import as_outputs, head_loss
from vspec.spec import (
    MHSA,
    Block,
    ClassTokenHead,
    ConformerHead,
    ConformerStem,
    ConvBranch,
    GAPHead,
    MeanShiftAttention,
    MGCrP,
    Model,
    RefinerAttention,
    SecondOrderHead,
    SpecError,
    SvPN,
    WindowMeanShiftAttention,
    WindowMHSA,
)

ROOT = Path(__file__).resolve().parents[3]


def fixture(name="conformer_small"):
    return torch.load(FIXTURES / f"{name}.pt", weights_only=True)


# The released model's own float32 rounding: its deep BN-ResNet branch moves the logits by 4.2e-6 (small) and
# 2.6e-6 (d3) between float32 and float64, and by 1.8e-6 between 1 and 2 threads; the converted model is
# 3.0e-6 from `conformer_small.pt` here. The fixtures' rule, 1e-5 (conftest.STORED_ATOL), covers it; a wrong
# mapping moves the logits by 1e-2 and more.
@pytest.mark.parametrize("name", ["conformer_small", "conformer_d3"])
def test_released_checkpoints_reproduced(name):
    data = fixture(name)
    model = from_official("conformer", data["state_dict"], data["config"]).eval()
    with torch.no_grad():
        assert_close_to_stored(model(data["x"]), data["y"][0] + data["y"][1])  # eval: the sum, as released
        tokens, conv = model.forward_features(data["x"])
        assert_close_to_stored(model.head.fc(conv.mean(dim=(2, 3))), data["y"][0])  # conv_cls
        assert_close_to_stored(model.head.tokens(model.head.norm(tokens)), data["y"][1])  # tran_cls


def test_training_returns_both_logits_and_the_loss_is_their_mean():
    data = fixture()
    model = from_official("conformer", data["state_dict"], data["config"]).train().set_training_outputs(True)
    out = as_outputs(model(data["x"]))
    assert [(o.name, o.target, o.weight) for o in out] == [("conv", "sample", 0.5), ("trans_logits", "sample", 0.5)]
    assert [o.name for o in out] == [o.name for o in model.spec.head.outputs()]
    target = torch.tensor([1, 7])
    mean = (F.cross_entropy(out[0].logits, target) + F.cross_entropy(out[1].logits, target)) / 2
    torch.testing.assert_close(head_loss(F.cross_entropy, out, target), mean)


# Conformer.__init__'s arguments (pengzhiliang/Conformer @ 815aaad, conformer.py), then the input size
CONSTRUCTOR = ("patch_size", "in_chans", "num_classes", "base_channel", "channel_ratio", "num_med_block", "embed_dim",
               "depth", "num_heads", "mlp_ratio", "qkv_bias", "qk_scale", "drop_rate", "attn_drop_rate",
               "drop_path_rate", "img_size")


def attentions(spec):
    return {b.attention for b in spec.blocks}


def branches(spec):
    return [b.conv for b in spec.blocks if "conv" in b.writes]


def as_small(spec):
    return spec == CONFORMER.spec_of(fixture()["config"])


CASES = {
    "patch_size": [({"patch_size": 32, "img_size": 128}, lambda s: [c.down for c in branches(s)] == [8, 4, 4, 2, 2]
                    and s.grid == (4, 4)),
                   ({"patch_size": 8}, r"patch_size 8: the couplings pool by patch / 4, / 8 and / 16")],
    "in_chans": [({"in_chans": 1}, lambda s: s.in_chans == 1)],
    "num_classes": [({"num_classes": 3}, lambda s: s.num_classes == 3),
                    ({"num_classes": 0}, r"num_classes 0: trans_cls_head becomes an identity")],
    "base_channel": [({"base_channel": 64}, as_small),
                     ({"base_channel": 32}, r"base_channel 32: conv_cls_head is hard-wired to 256 x channel_ratio")],
    "channel_ratio": [({"channel_ratio": 0.5}, lambda s: [c.width for c in branches(s)] == [32, 64, 64, 128, 128]
                       and s.embedder.width == 32)],
    "num_med_block": [({"num_med_block": 2}, lambda s: {c.med_blocks for c in branches(s)} == {2})],
    "embed_dim": [({"embed_dim": 32}, lambda s: s.dim == 32)],
    "depth": [({"depth": 9}, lambda s: s.depth == 9 and len(branches(s)) == 8),
              ({"depth": 4}, r"depth 4: the constructor asserts a multiple of 3")],
    "num_heads": [({"num_heads": 4}, lambda s: {a.heads for a in attentions(s)} == {4})],
    "mlp_ratio": [({"mlp_ratio": 2.0}, lambda s: {b.ffn.ratio for b in s.blocks} == {2.0})],
    "qkv_bias": [({"qkv_bias": False}, lambda s: {a.qkv_bias for a in attentions(s)} == {False})],
    "qk_scale": [({"qk_scale": 0.0625}, lambda s: {a.scale for a in attentions(s)} == {0.0625})],
    "drop_rate": [({"drop_rate": 0.1}, lambda s: {a.proj_drop for a in attentions(s)} == {0.1}
                   and {b.ffn.drop for b in s.blocks} == {0.1})],
    "attn_drop_rate": [({"attn_drop_rate": 0.1}, lambda s: {a.attn_drop for a in attentions(s)} == {0.1})],
    "drop_path_rate": [({"drop_path_rate": 0.1}, lambda s: s.drop_path == 0.1)],
    "img_size": [({"img_size": 96}, lambda s: s.img_size == (96, 96)),
                 ({"img_size": [64, 64]}, r"img_size \[64, 64\]: one int")],
    "unknown keys": [({"groups": 2}, r"unknown argument 'groups'; the released constructor takes patch_size, ")],
}


def test_the_cases_cover_every_constructor_argument():
    assert tuple(CONFORMER.arguments) == CONSTRUCTOR
    assert list(CASES) == [*CONSTRUCTOR, "unknown keys"]


@pytest.mark.parametrize(**argument_cases(CASES))
def test_every_conformer_argument_is_honoured_or_refused_by_name(changes, expect):
    data = fixture()
    check_argument("conformer", "Conformer", data["state_dict"], {**data["config"], **changes}, expect)


def test_training_only_arguments_leave_the_eval_output_as_released():
    data = fixture()
    changes = {"drop_rate": 0.1, "attn_drop_rate": 0.1, "drop_path_rate": 0.1}
    model = from_official("conformer", data["state_dict"], {**data["config"], **changes}).eval()
    with torch.no_grad():
        assert_close_to_stored(model(data["x"]), data["y"][0] + data["y"][1])


def test_med_blocks_build_and_run():
    spec = CONFORMER.spec_of({**fixture()["config"], "num_med_block": 1})
    model = vspec.build(spec).eval()
    assert len(model.stages[1].blocks[0].conv.med_block) == 1
    assert model(model.example_input(2)).shape == (2, 10)


# ---------------------------------------------------------------- the two-state block contract
def small():
    return CONFORMER.spec_of(fixture()["config"])


def test_a_coupled_block_changes_the_map_and_a_plain_one_hands_it_on():
    model = vspec.build(small()).eval()
    maps = [s["conv"] for s in model.state_layout]
    # the map each block receives, then the head's: the last fusion halves the grid
    assert [str(m) for m in maps] == ["16x16 map x 16"] * 3 + ["8x8 map x 32"] * 2 + ["4x4 map x 64", "2x2 map x 64"]
    plain, coupled = model.stages[0].blocks
    x, conv = torch.randn(2, 17, 64), torch.randn(2, 16, 16, 16)
    with torch.no_grad():
        out = plain(x, {"conv": conv})
        assert isinstance(out, Carry) and out.state["conv"] is conv and set(out.state) == {"conv"}
        out = coupled(x, {"conv": conv})
        assert out.state["conv"].shape == (2, 16, 16, 16) and out.x.shape == x.shape


def test_a_plain_model_is_unchanged():
    """One branch: no conv submodule, the same state-dict keys as before the carried state, and no state carried."""
    model = vspec.build(Model(block=Block(attention=MHSA(heads=2)), depth=2, dim=32, img_size=32, num_classes=3))
    assert model.state_layout == ({}, {}, {})
    assert not any(".conv." in k or k.endswith(".conv") for k in model.state_dict())
    assert model.stages[0].blocks[0](torch.randn(1, 5, 32)).state == {}


def test_the_profile_counts_every_part_of_both_branches():
    prof = vspec.profile(small())
    assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs
    assert prof.params == sum(p.numel() for p in from_official("conformer", fixture()["state_dict"],
                                                                  fixture()["config"]).parameters())
    assert set(prof.components) == {"embedder", "head", *(f"stages.{s}.blocks.{j}" for s in range(3) for j in range(2))}


# ---------------------------------------------------------------- rules
@pytest.mark.parametrize("change,path,message", [
    (lambda s: attrs.evolve(s, head=vspec.spec.ClassTokenHead()), "head",
     "a conformer_stem embedder's CNN map must reach a head that reads it"),
    (lambda s: attrs.evolve(s, embedder=vspec.spec.PatchEmbed(), head=vspec.spec.ClassTokenHead()),
     "stages.0.block.1", "a coupled block takes a CNN map, which needs an embedder that yields one"),
    (lambda s: attrs.evolve(s, embedder=vspec.spec.PatchEmbed(), final_norm=True, stages=[
        attrs.evolve(st, block=[Block(attention=MHSA(heads=2))] * st.depth) for st in s.stages]),
     "head", "the conformer head reads a CNN map"),
    (lambda s: attrs.evolve(s, class_token=False), "stages.0.block.1.conv", "FCUDown prepends the class token"),
    (lambda s: vspec.override(s, {"stages.1.block.0.conv.down": 4}), "stages.1.block.0.conv.down",
     "the 8x8 map pooled by 4 is not the 4x4 token grid"),
])
def test_rules(change, path, message):
    with pytest.raises(SpecError, match=message) as info:
        change(small())
    assert info.value.path == path


def test_field_rules():
    with pytest.raises(SpecError, match="is not a multiple of 4"):
        ConvBranch(width=6)
    with pytest.raises(SpecError, match="is not a multiple of 4"):
        attrs.evolve(small(), embedder=ConformerStem(patch_size=6), img_size=48)
    with pytest.raises(SpecError, match="a conformer head's token head reads tokens only"):
        attrs.evolve(small(), head=ConformerHead(tokens=ConformerHead()))


# ---------------------------------------------------------------- the transformer branch takes any 1-D attention
@pytest.mark.parametrize("attention", [MHSA(heads=2), MeanShiftAttention(heads=2), RefinerAttention(heads=2),
                                       MeanShiftAttention(heads=2, form="eq14")], ids=lambda a: f"{a.kind}")
def test_the_transformer_branch_takes_any_attention_over_all_tokens(attention):
    """Build, forward, backward: every parameter of both branches learns (float64), and the profile is complete."""
    spec = conformer_model(block=Block(attention=attention), med_blocks=1)
    torch.manual_seed(0)
    model = vspec.build(spec).eval().double()
    out = model(vspec.example_input(spec, 2, dtype=torch.float64))
    (out * torch.randn_like(out)).sum().backward()
    assert_every_parameter_learns(model)
    prof = vspec.profile(spec)
    assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs


@pytest.mark.parametrize("attention", [WindowMHSA(heads=2, window=2), WindowMeanShiftAttention(heads=2, window=2)],
                         ids=lambda a: a.kind)
def test_windowed_attentions_are_refused_in_a_coupled_body(attention):
    """A window partitions the token grid, which has no place for the class token that FCUDown prepends."""
    with pytest.raises(SpecError, match="a class token has no place in it"):
        conformer_model(block=Block(attention=attention))
    with pytest.raises(SpecError, match="FCUDown prepends the class token") as info:
        conformer_model(block=Block(attention=attention), class_token=False)
    assert info.value.path == "stages.1.block.conv"


# ---------------------------------------------------------------- presets: Conformer-Ti and SoT's head on it
TI = {"patch_size": 16, "channel_ratio": 1, "embed_dim": 384, "depth": 12, "num_heads": 6, "mlp_ratio": 4.0,
      "qkv_bias": True}


def test_conformer_ti_is_the_released_model():
    spec = vspec.load_spec(ROOT / "specs/conformer_ti.py")
    assert spec == CONFORMER.spec_of(TI)
    assert sum(p.numel() for p in vspec.build(spec, "meta").parameters()) == 23_524_704  # the released count


def test_sot_head_on_conformer_replaces_the_token_classifier_only():
    base, sot = (vspec.load_spec(ROOT / f"specs/{n}.py") for n in ("conformer_ti", "conformer_ti_sot"))
    assert attrs.evolve(sot, head=base.head) == base
    assert sot.head.tokens == SecondOrderHead(fusion="sum", pool=MGCrP(heads=6, m=34, n=34), norm=SvPN(alpha=0.5))


def test_sot_head_on_a_small_conformer_trains_both_branches():
    """The composition: training returns conv and SoT's one output; every parameter of both branches and of
    SoT's head learns (eval mode: in training, BatchNorm cancels the bias of the conv before it, as released)."""
    head = ConformerHead(tokens=SecondOrderHead(fusion="sum", pool=MGCrP(heads=2, m=3, n=3), norm=SvPN()))
    spec = conformer_model(head=head)
    model = vspec.build(spec).double()
    x = vspec.example_input(spec, 2, dtype=torch.float64)
    out = as_outputs(model.train().set_training_outputs(True)(x))
    assert [(o.name, o.weight) for o in out] == [("conv", 0.5), ("trans_logits", 0.5)]
    assert torch.isfinite(head_loss(F.cross_entropy, out, torch.tensor([0, 2])))
    y = model.eval()(x)
    (y * torch.randn_like(y)).sum().backward()
    assert_every_parameter_learns(model)


@pytest.fixture(scope="module")
def preset_profiles():
    return {n: vspec.profile(vspec.load_spec(ROOT / f"specs/{n}.py")) for n in ("conformer_ti", "conformer_ti_sot")}


def test_readme_conformer_table_is_measured(preset_profiles):
    """The Conformer page's table: params (M, 3 decimals), conv + linear MACs and all MACs (G, 3 decimals)."""
    section = doc("families/conformer")
    rows = re.findall(r"^\| (conformer_ti\w*) \| ([\d.]+) M \|[^|]*\| ([\d.]+) G \| ([\d.]+) G \|", section, re.M)
    assert [r[0] for r in rows] == ["conformer_ti", "conformer_ti_sot"]
    for name, params, conv_linear, macs in rows:
        prof = preset_profiles[name]
        assert prof.unsupported_ops == [] and prof.crosscheck_macs == prof.macs
        measured = (prof.params / 1e6, prof.conventions["conv_linear"] / 1e9, prof.macs / 1e9)
        assert (params, conv_linear, macs) == tuple(f"{v:.3f}" for v in measured)
    head = preset_profiles["conformer_ti_sot"].macs - preset_profiles["conformer_ti"].macs
    assert f"The head adds {round(head / 1e6)} M MACs" in section


@pytest.mark.parametrize("tokens", [ClassTokenHead(), GAPHead(), SecondOrderHead(pool=MGCrP(heads=2, m=3, n=3))],
                         ids=lambda h: h.kind)
def test_timm_head_api_on_two_branches(tokens):
    """forward_features gives (tokens, map); get_classifier maps pre-logits (the map's mean, then the token head's
    features) to the eval logits; reset_classifier resets both classifiers."""
    spec = conformer_model(head=ConformerHead(tokens=tokens))
    model = vspec.build(spec).eval()
    x = vspec.example_input(spec, 2)
    with torch.no_grad():
        features = model.forward_features(x)
        assert [tuple(f.shape) for f in features] == [(2, 5, 16), (2, 32, 1, 1)]
        torch.testing.assert_close(model.get_classifier()(model.forward_head(features, pre_logits=True)),
                                   model.forward_head(features))
        model.reset_classifier(5)
        assert model(x).shape == (2, 5) and model.spec.num_classes == 5
    # the taps carry the map through the blocks as the forward pass does: each block's tokens, the last the
    # features' tokens (Conformer has no final norm), as maps of the patch tokens
    with torch.no_grad():
        taps = model.forward_intermediates(x, intermediates_only=True)
        assert [tuple(t.shape) for t in taps] == [(2, 16, 2, 2)] * 3
        torch.testing.assert_close(taps[-1].flatten(2).transpose(1, 2), model.forward_features(x)[0][:, 1:])
    with pytest.raises(ValueError, match=r"the head reads the state of the last block \(conv\)"):
        model.prune_intermediate_layers(1, prune_head=False)


# ---------------------------------------------------------------- one coupled block against the paper's description
def _bn(z, bn):
    return (z - bn.running_mean[:, None, None]) / torch.sqrt(bn.running_var[:, None, None] + bn.eps) \
        * bn.weight[:, None, None] + bn.bias[:, None, None]


def _bottleneck(z, b, add=None):
    """1x1 -> BN -> ReLU -> (+ add) 3x3 -> BN -> ReLU -> 1x1 -> BN, + shortcut, ReLU (He et al.)."""
    h = torch.relu(_bn(F.conv2d(z, b.conv1.weight), b.bn1))
    mid = torch.relu(_bn(F.conv2d(h if add is None else h + add, b.conv2.weight, stride=b.conv2.stride, padding=1),
                         b.bn2))
    skip = _bn(F.conv2d(z, b.residual_conv.weight, stride=b.residual_conv.stride), b.residual_bn) if b.project else z
    return torch.relu(_bn(F.conv2d(mid, b.conv3.weight), b.bn3) + skip), mid


def _layer_norm(x, ln):
    mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    return (x - mu) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def _vit_block(x, block, heads):
    """x + MHSA(LN(x)), then x + MLP(LN(x)): softmax(q k^T / sqrt(d)) v per head."""
    b, n, d = x.shape
    qkv = (_layer_norm(x, block.norm1) @ block.attn.qkv.weight.T + block.attn.qkv.bias).view(b, n, 3, heads, -1)
    q, k, v = qkv.permute(2, 0, 3, 1, 4)
    a = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
    x = x + (a @ v).transpose(1, 2).reshape(b, n, d) @ block.attn.proj.weight.T + block.attn.proj.bias
    h = _layer_norm(x, block.norm2) @ block.ffn.fc1.weight.T + block.ffn.fc1.bias
    return x + F.gelu(h) @ block.ffn.fc2.weight.T + block.ffn.fc2.bias


def test_a_coupled_block_is_the_papers_conv_trans_block():
    """Conformer Sec. 3 / Fig. 2, in float64: the CNN block; FCU down (1x1 conv, average pooling, LayerNorm, GELU),
    the class token prepended, added to the tokens; the transformer block; FCU up (1x1 conv, BN, ReLU, nearest
    up-sampling) added to the fusion block's 3x3 input."""
    spec = conformer_model(block=Block(attention=MHSA(heads=2)), med_blocks=1)
    torch.manual_seed(0)
    model = vspec.build(spec).double().eval()
    with torch.no_grad():
        for m in model.modules():  # statistics away from (0, 1), so that a wrong BN cannot hide
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2), m.bias.uniform_(-0.5, 0.5)
    block, c = model.stages[1].blocks[0], model.stages[1].blocks[0].conv
    x, conv = torch.randn(2, 5, 16, dtype=torch.float64), torch.randn(2, 8, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        out, mid = _bottleneck(conv, c.cnn_block)
        t = F.avg_pool2d(F.conv2d(mid, c.squeeze_block.conv_project.weight, c.squeeze_block.conv_project.bias), 2)
        t = F.gelu(_layer_norm(t.flatten(2).transpose(1, 2), c.squeeze_block.ln))
        y = _vit_block(x + torch.cat((x[:, :1], t), dim=1), block, 2)
        for med in c.med_block:
            out = _bottleneck(out, med)[0]
        up = F.conv2d(y[:, 1:].transpose(1, 2).reshape(2, 16, 2, 2), c.expand_block.conv_project.weight,
                      c.expand_block.conv_project.bias)
        up = torch.relu(_bn(up, c.expand_block.bn)).repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)
        expected = _bottleneck(out, c.fusion_block, up)[0]
        got = block(x, {"conv": conv})
    torch.testing.assert_close(got.x, y, rtol=0, atol=1e-12)
    torch.testing.assert_close(got.state["conv"], expected, rtol=0, atol=1e-12)
