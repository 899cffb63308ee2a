"""timm conformance: timm ViT and Swin weights loaded into the matching vspec spec give timm's logits; vspec's ViT,
DeiT and Swin written for timm (`to_timm`) load strictly into timm's own model with the same logits, and back."""

from functools import cache
from pathlib import Path

import attrs
import pytest
import timm  # vspec[train], part of vspec[dev]
import torch
from safetensors.torch import load_file, save_file

import vspec
from vspec.convert import ConversionError, from_timm, to_timm
from vspec.convert.timm import timm_weights
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


# vspec -> timm (`to_timm`): (spec, timm's name) of the shapes written; every weight perturbed
SWIN_SMALL = {"stages.2.depth": 2, "img_size": 64, "num_classes": 5, "drop_path": 0.0,
              **{f"stages.{i}.dim": 16 * 2**i for i in range(4)},
              **{f"stages.{i}.block.attention.heads": 2**i for i in range(4)},
              **{f"stages.{i}.block.attention.window": 4 for i in range(4)}}
EXPORTS = {
    "deit_tiny_small_images": ("deit_tiny.py", {"depth": 2, "img_size": 32, "embedder.patch_size": 8,
                                                "num_classes": 10}, "vit_tiny_patch16_224"),
    "vit_gap_fc_norm": ("deit_small.py", {"depth": 1, "img_size": [32, 48], "head": {"kind": "gap", "norm": {}},
                                          "final_norm": False}, "vit_small_patch16_224"),
    "vit_layer_scale_tanh_eps": ("vit_base.py", {"depth": 1, "dim": 64, "block.attention.heads": 4, "img_size": 32,
                                                 "block.layer_scale": 1e-5, "block.norm.eps": 1e-5,
                                                 "block.ffn.act": "gelu_tanh", "block.attention.qkv_bias": False},
                                 "vit_tiny_patch16_224"),  # no standard size: the first, its arguments changed
    "swin_tiny_shrunk": ("swin_tiny.py", SWIN_SMALL, "swin_tiny_patch4_window7_224"),
}


@pytest.mark.parametrize("case", sorted(EXPORTS))
def test_to_timm_round_trips_and_timm_loads_it_strictly(case, tmp_path):
    """to_timm writes timm's state dict: `timm.create_model(name, **kwargs)` (its pretrained path, strict) and a
    plain strict `load_state_dict` take it, with vspec's logits; `from_timm` gives the weights back bit for bit."""
    spec_file, changes, name = EXPORTS[case]
    spec = override(load_spec(SPECS / spec_file), changes) if changes else load_spec(SPECS / spec_file)
    torch.manual_seed(0)
    model = vspec.build(spec)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    model.eval()
    made = to_timm(model, tmp_path / "weights.safetensors")
    assert made.name == name
    net = timm.create_model(made.name, **made.kwargs).eval()
    assert net.pretrained_cfg["num_classes"] == spec.num_classes == net.num_classes
    plain = {k: v for k, v in made.kwargs.items() if k not in ("pretrained", "pretrained_cfg_overlay")}
    fresh = timm.create_model(made.name, **plain)
    result = fresh.load_state_dict(load_file(tmp_path / "weights.safetensors"), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    x = torch.randn(2, spec.in_chans, *spec.img_size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(x)
        assert (net(x) - logits).abs().max() <= 1e-5 and logits.abs().max() > 1e-2
        back = from_timm(net, spec).eval()
        assert torch.equal(back(x), logits)
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in model.state_dict().items())


def test_to_timm_names_the_file_and_a_folder_gets_model_safetensors(tmp_path):
    """The overlay points at the file; a path without the suffix is a folder. A file with a key timm's model lacks
    is refused by timm's own load: the load is strict."""
    spec = override(load_spec(SPECS / "deit_tiny.py"), EXPORTS["deit_tiny_small_images"][1])
    made = to_timm(vspec.build(spec), tmp_path / "out")
    file = tmp_path / "out" / "model.safetensors"
    assert made.kwargs["pretrained_cfg_overlay"]["file"] == str(file) and file.is_file()
    save_file({**load_file(file), "extra": torch.zeros(1)}, file)
    with pytest.raises(RuntimeError, match="Unexpected key.*extra"):
        timm.create_model(made.name, **made.kwargs)


@pytest.mark.parametrize(("spec_file", "name"), PAIRS, ids=[n for _, n in PAIRS])
def test_every_full_size_preset_is_timms_named_model(spec_file, name):
    """At full size, on the meta device: the preset is timm's model of that name with no argument changed but
    Swin's drop_path (the paper's; timm's default 0.1), and the weights hold timm's parameter count."""
    spec = load_spec(SPECS / spec_file)
    made, weights = timm_weights((spec, vspec.build(spec, "meta").state_dict()))
    assert made.name == name
    changed = {k: v for k, v in made.kwargs.items() if k not in ("pretrained", "pretrained_cfg_overlay")}
    assert changed == ({"drop_path_rate": spec.drop_path} if name.startswith("swin") else {})
    with torch.device("meta"):
        assert sum(v.numel() for v in weights.values()) == n_params(timm.create_model(name))


def _refused():
    deit = override(load_spec(SPECS / "deit_tiny.py"), {"depth": 1, "img_size": 32, "embedder.patch_size": 8})
    return [
        ("sot_head", load_spec(SPECS / "swin_tiny_sot.py"), r"^head: second_order \(the sot family's\) has no timm "
                                                           r"equivalent \(swin has gap\)$"),
        ("refiner", load_spec(SPECS / "refined_vit_s.py"), r"^block\.0: adjusted \(the refiner family's\)"),
        ("msf", load_spec(SPECS / "msf_vit_ti.py"), r"^block\.attention: mean_shift \(the msf family's\)"),
        ("msf_swin", load_spec(SPECS / "msf_swin_tiny.py"), r"^stages\.0\.block\.attention: window_mean_shift"),
        ("text", load_spec(SPECS / "bert_base.py"), r"^embedder: tokens \(a text model\) has no timm equivalent"),
        ("dynamic", override(deit, {"dynamic_img_size": True}), r"^dynamic_img_size: True has no timm equivalent"),
        ("scale", override(deit, {"block.attention.scale": 0.3}), r"^block\.attention\.scale: 0\.3 .*\(vit has None\)"),
        ("sincos", override(deit, {"pos_embed": "sincos1d"}), r"^pos_embed: 'sincos1d'"),
        ("dense", load_spec(SPECS / "compare_vit_dense.py"), r"^head\.dense: "),
        ("gap_and_final_norm", override(deit, {"head": {"kind": "gap", "norm": {}}}), r"^final_norm: True"),
    ]


REFUSED = _refused()


@pytest.mark.parametrize(("spec", "match"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_what_timm_lacks_is_refused_in_one_line_before_anything_is_written(spec, match, tmp_path):
    with pytest.raises(ConversionError, match=match) as info:
        to_timm((spec, vspec.build(spec, "meta").state_dict()), tmp_path / "out.safetensors")
    assert "\n" not in str(info.value) and not any(tmp_path.iterdir())
