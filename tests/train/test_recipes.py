"""The named recipes against the papers' tables: Refiner's Table 8 (standard and advanced columns), field by
field, and the depth-scaled stochastic depth of the advanced column."""

import attrs
import pytest

from vspec import load_spec
from vspec.train.recipes import RECIPES, drop_path_rate, resolve
from vspec.train.validators import ConfigError

from ..helpers import ROOT

# Refiner, appendix A.1, Table 8, as printed: (standard, advanced). LR is 5e-3 x batch / 256 (standard) and
# 5e-3 x batch / 512 (advanced); stochastic depth 0.1 (standard) and 0.1 x #blocks / 12 (advanced).
TABLE_8 = {
    "epochs": (300, 300),
    "batch_size": (256, 512),
    "lr at the table's batch": (5e-3, 5e-3),
    "schedule": ("cosine", "cosine"),
    "weight_decay": (0.05, 0.05),
    "warmup_epochs": (5, 5),
    "drop_path": (0.1, 0.1),
    "drop path scaled by #blocks / 12": (False, True),
    "mixup": (0.2, 0.8),
    "cutmix": (0.0, 1.0),
    "re_prob": (0.25, 0.25),
    "RandAug magnitude / std": ((9, 0.5), (9, 0.5)),
}


def row(recipe):
    parts = recipe.auto_augment.split("-")
    m = next(p for p in parts if p[0] == "m" and p[1].isdigit())
    mstd = next(p for p in parts if p.startswith("mstd"))
    return {
        "epochs": recipe.epochs, "batch_size": recipe.batch_size, "lr at the table's batch": recipe.lr,
        "schedule": recipe.schedule, "weight_decay": recipe.weight_decay, "warmup_epochs": recipe.warmup_epochs,
        "drop_path": recipe.drop_path, "drop path scaled by #blocks / 12": recipe.drop_path_by_depth,
        "mixup": recipe.mixup, "cutmix": recipe.cutmix, "re_prob": recipe.re_prob,
        "RandAug magnitude / std": (int(m[1:]), float(mstd[4:])),
    }


@pytest.mark.parametrize("column,name", [(0, "refiner"), (1, "refiner_advanced")])
def test_refiners_recipes_are_table_8_field_by_field(column, name):
    got = row(RECIPES[name])
    assert got == {k: v[column] for k, v in TABLE_8.items()}
    assert RECIPES[name].auto_augment.startswith("rand-")  # RandAugment, not AutoAugment
    base = 256 if column == 0 else 512  # the table's rule: lr linear in the batch size
    assert resolve(name, batch_size=1024).lr == pytest.approx(5e-3 * 1024 / base)


@pytest.mark.parametrize("preset,blocks", [("refined_vit_s", 16), ("deit_tiny", 12)])
def test_the_advanced_drop_path_is_0_1_times_blocks_over_12(preset, blocks):
    spec = load_spec(ROOT / "specs" / f"{preset}.py")
    assert spec.depth == blocks
    assert drop_path_rate(RECIPES["refiner_advanced"], spec) == pytest.approx(0.1 * blocks / 12)
    assert drop_path_rate(RECIPES["refiner"], spec) == 0.1


def test_a_depth_scaled_rate_of_1_or_more_is_refused_naming_the_field():
    spec = load_spec(ROOT / "specs" / "refined_vit_s.py")  # 16 blocks: 0.8 x 16 / 12 > 1
    with pytest.raises(ConfigError, match="drop_path: 0.8 x 16 blocks / 12"):
        drop_path_rate(attrs.evolve(RECIPES["refiner_advanced"], drop_path=0.8), spec)
