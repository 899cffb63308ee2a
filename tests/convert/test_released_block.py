"""The ViT block the released converters share (`vspec.convert.common.released_block`): one rule for `qk_scale`,
the releases' own expression. SoT, T2T-ViT, iRPE, Conformer and Refiner each write `self.scale = qk_scale or
head_dim ** -0.5` (read in their repositories), so None and 0 are the default scale and a number is itself; the
expected scales below are that expression, computed here from the fixtures' configs."""

import re

import pytest
import torch

from tests.helpers.checks import FIXTURES
from vspec.convert import ConversionError, official

# family -> a fixture holding one of its released configs
RELEASES = {"sot": "sot_densenet_sum_fc", "t2t": "t2t_performer", "irpe": "irpe_ctx_product_k",
            "conformer": "conformer_small", "refiner": "refiner_cls"}


def config(family: str, qk_scale) -> dict:
    config = dict(torch.load(FIXTURES / f"{RELEASES[family]}.pt", weights_only=True)["config"])
    config["qk_scale"] = qk_scale
    if "cfg_snapshot" in config:  # SoT: the ViT config's copy of the argument says the same
        snapshot = config["cfg_snapshot"]
        config["cfg_snapshot"] = {**snapshot, "ViTConfig": {**snapshot["ViTConfig"], "qk_scale": qk_scale}}
    return config


@pytest.mark.parametrize("family", RELEASES)
@pytest.mark.parametrize("qk_scale", [None, 0, 0.0, 0.125, 1])
def test_qk_scale_is_the_releases_expression(family, qk_scale):
    c = config(family, qk_scale)
    released = qk_scale or (c["embed_dim"] // c["num_heads"]) ** -0.5  # the releases' `qk_scale or head_dim ** -0.5`
    spec = official()[family].spec_of(c)
    attentions = {b.attention for b in spec.blocks}
    got = {a.scale if a.scale is not None else (spec.dim // a.heads) ** -0.5 for a in attentions}
    assert len(got) == 1 and got.pop() == pytest.approx(released, rel=1e-12)
    assert {a.scale for a in attentions} == {float(qk_scale) if qk_scale else None}  # the default stays the default


@pytest.mark.parametrize("family", RELEASES)
@pytest.mark.parametrize("qk_scale", ["0.1", True, [0.1]])
def test_a_qk_scale_that_is_not_a_number_is_refused_in_one_line(family, qk_scale):
    why = f": qk_scale {qk_scale!r}: a number, or None for head_dim ** -0.5"
    with pytest.raises(ConversionError, match=re.escape(why) + "$"):
        official()[family].spec_of(config(family, qk_scale))
