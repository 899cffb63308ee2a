"""LV-ViT's presets are the released factories (tlt/models/lvvit.py) at every resolution the README publishes: their
parameter and state-dict counts are the ones the fixtures record for the released models (lvvit_sizes.json, counted
on the meta device here), and their weights entries name the release's files and evaluation preprocessing."""

import json

import pytest
import torch

import vspec
from tests.helpers.checks import FIXTURES
from vspec.factory import presets
from vspec.models.lvvit.convert import LVVIT
from vspec.models.lvvit.weights import FACTORIES
from vspec.spec import load_spec, load_weights_table
from vspec.weights import published

SIZES = json.loads((FIXTURES / "lvvit_sizes.json").read_text())
# preset -> (released factory, resolution): 224 px is the factory's default, the others its --img-size
PRESETS = {"lvvit_t": ("lvvit_t", 224), "lvvit_s": ("lvvit_s", 224), "lvvit_s_384": ("lvvit_s", 384),
           "lvvit_m": ("lvvit_m", 224), "lvvit_m_384": ("lvvit_m", 384), "lvvit_m_448": ("lvvit_m", 448),
           "lvvit_l": ("lvvit_l", 224), "lvvit_l_448": ("lvvit_l", 448), "lvvit_l_512": ("lvvit_l", 512)}


def released(factory: str, size: int) -> dict:
    return SIZES["factories"][factory]["per_resolution"][str(size)]


def test_every_published_resolution_has_a_preset():
    published = {(f, int(r)) for f in FACTORIES for r in SIZES["factories"][f]["per_resolution"]}
    assert set(PRESETS.values()) == published
    assert set(PRESETS) == {name for name in presets() if name.startswith("lvvit")}


@pytest.mark.parametrize("name", PRESETS)
def test_the_preset_is_the_released_factory_with_its_counts(name):
    factory, size = PRESETS[name]
    spec = load_spec(presets()[name])
    assert spec == LVVIT.spec_of({**SIZES["factories"][factory]["factory_args"], "img_size": size})
    with torch.device("meta"):
        model = vspec.build(spec)
    counts = released(factory, size)
    assert published.params(model) == counts["params"]
    assert len(model.state_dict()) == counts["state_dict_keys"]
    assert tuple(model.pos_embed.shape) == tuple(counts["pos_embed_shape"])


@pytest.mark.parametrize("name", [n for n, (f, r) in PRESETS.items() if "weights_url" in released(f, r)])
def test_the_weights_are_the_released_files_with_their_evaluation(name):
    factory, size = PRESETS[name]
    (entry,) = load_weights_table(presets()[name]).values()
    counts = released(factory, size)
    assert entry.source.url == counts["weights_url"]
    assert entry.params == counts["params"]
    assert entry.score == f"ImageNet-1k top-1 {counts['readme_top1']} (TokenLabeling README)"
    cfg, evaluation = SIZES["factories"][factory]["default_cfg"], SIZES["eval_preprocessing"]
    assert entry.preprocess.crop_pct == cfg["crop_pct"] == evaluation["crop_pct"][factory]
    assert (entry.preprocess.mean, entry.preprocess.std) == (tuple(cfg["mean"]), tuple(cfg["std"]))
    assert entry.preprocess.interpolation == cfg["interpolation"] == "bicubic"
    assert entry.preprocess.input_size == (3, size, size)
    assert entry.config == {**SIZES["factories"][factory]["factory_args"], "img_size": size}
    assert entry.unwrap == ("state_dict",)
