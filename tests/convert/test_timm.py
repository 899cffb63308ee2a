"""timm conformance: timm ViT and Swin weights loaded into the matching vspec spec give timm's logits."""

from functools import cache
from pathlib import Path

import attrs
import pytest
import timm  # vspec[train], part of vspec[dev]
import torch

from vspec.convert import ConversionError, from_timm
from vspec.spec import GAPHead, Norm, load_spec, override

SPECS = Path(__file__).resolve().parents[2] / "specs"
PAIRS = [
    ("deit_tiny.py", "vit_tiny_patch16_224"),
    ("deit_small.py", "vit_small_patch16_224"),
    ("vit_base.py", "vit_base_patch16_224"),
    ("swin_tiny.py", "swin_tiny_patch4_window7_224"),
    ("swin_small.py", "swin_small_patch4_window7_224"),
    ("swin_base.py", "swin_base_patch4_window7_224"),
]
SHAPE = r"shape \(\d+(, \d+)*\)"

torch.set_num_threads(2)


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@cache
def _timm_model(name: str, global_pool: str | None = None) -> torch.nn.Module:
    torch.manual_seed(0)
    kwargs = {} if global_pool is None else {"global_pool": global_pool, "class_token": True}
    model = timm.create_model(name, pretrained=False, **kwargs)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model.eval()


def timm_model(name: str, global_pool: str | None = None) -> torch.nn.Module:
    """A randomly initialised timm model whose weights are then all perturbed, so that norms are not
    1 / 0 and biases not 0: a swapped or dropped tensor in the conversion changes the logits.
    Cached (the tests only read it); `global_pool` is timm's, with class_token=True."""
    model = _timm_model(name, global_pool)
    assert not model.training
    return model


def assert_same_logits(timm_net: torch.nn.Module, ours: torch.nn.Module, batch: int = 2):
    torch.manual_seed(1)
    x = torch.randn(batch, 3, 224, 224)
    with torch.no_grad():
        expected = timm_net(x)
        got = ours(x)
    assert got.shape == expected.shape == (batch, 1000)
    assert expected.abs().max() > 1e-2  # a non-trivial comparison
    diff = (got - expected).abs().max().item()
    assert diff <= 1e-5, f"max abs logit difference {diff}"
    return x, got


@pytest.mark.parametrize(("spec_file", "name"), PAIRS, ids=[n for _, n in PAIRS])
def test_from_timm_matches_timm(spec_file, name):
    spec = load_spec(SPECS / spec_file)
    ref = timm_model(name)
    ours = from_timm(ref, spec)
    assert ours.spec == spec and not any(m.training for m in ours.modules())  # eval, as every loader's
    assert n_params(ours) == n_params(ref)
    x, logits = assert_same_logits(ref, ours)

    # the same from a state dict
    from_state = from_timm(ref.state_dict(), spec).eval()
    ours_state, theirs = from_state.state_dict(), ref.state_dict()
    assert set(ours_state) == set(ours.state_dict())
    assert len(ours_state) == len(theirs)
    assert all(torch.equal(ours_state[k], v) for k, v in ours.state_dict().items())
    with torch.no_grad():
        assert torch.equal(from_state(x), logits)


def test_mismatched_spec_names_a_shape():
    ref = timm_model("vit_tiny_patch16_224")
    with pytest.raises(ConversionError, match=SHAPE) as info:
        from_timm(ref, load_spec(SPECS / "deit_small.py"))
    assert "192" in str(info.value) and "384" in str(info.value)
    with pytest.raises(ConversionError, match=SHAPE):
        from_timm(ref.state_dict(), load_spec(SPECS / "deit_small.py"))


def test_mismatched_depth_names_the_keys():
    ref = timm_model("vit_tiny_patch16_224")
    spec = attrs.evolve(load_spec(SPECS / "deit_tiny.py"), depth=11)
    with pytest.raises(ConversionError, match=r"unused checkpoint keys: blocks\.11\."):
        from_timm(ref, spec)
    spec = attrs.evolve(load_spec(SPECS / "deit_tiny.py"), num_classes=10)
    with pytest.raises(ConversionError, match=r"head\.weight -> head\.fc\.weight: checkpoint " + SHAPE):
        from_timm(ref, spec)


def test_from_timm_global_average_pool_with_fc_norm():
    """timm's global_pool='avg': no final norm; mean over patch tokens -> fc_norm -> head."""
    ref = timm_model("vit_tiny_patch16_224", global_pool="avg")
    assert isinstance(ref.norm, torch.nn.Identity) and not isinstance(ref.fc_norm, torch.nn.Identity)
    spec = attrs.evolve(load_spec(SPECS / "deit_tiny.py"), head=GAPHead(norm=Norm(eps=1e-6)), final_norm=False)
    ours = from_timm(ref, spec).eval()
    assert n_params(ours) == n_params(ref)
    assert_same_logits(ref, ours)
    # the class-token spec does not describe this checkpoint
    with pytest.raises(ConversionError, match="fc_norm"):
        from_timm(ref, load_spec(SPECS / "deit_tiny.py"))


def test_swin_t_parameter_count_and_mismatches():
    ref = timm_model("swin_tiny_patch4_window7_224")
    assert n_params(ref) == 28_288_354
    spec = load_spec(SPECS / "swin_tiny.py")
    # a window of 14: a (2 * 14 - 1)^2-entry bias table where timm's window 7 has 13^2
    wide = override(spec, {f"stages.{i}.block.attention.window": 14 for i in range(4)})
    with pytest.raises(ConversionError, match=r"relative_position_bias_table: checkpoint shape \(169, 3\) does not "
                                              r"fit the spec's \(729, 3\)"):
        from_timm(ref, wide)
    # a stage too shallow: the deepest stage's last blocks are left over
    with pytest.raises(ConversionError, match=r"unused checkpoint keys: layers\.2\.blocks\.5\."):
        from_timm(ref, override(spec, {"stages.2.depth": 5}))
