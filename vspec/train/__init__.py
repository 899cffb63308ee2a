"""Training: data, recipes, checkpoints and the loop behind tools/train.py.

The configuration and the data sets' table are torch-free: `TrainConfig(spec, recipe, DataConfig(...),
RunConfig(...))` checks every field as it is made (`ConfigError`); `run(cfg)` (vspec/train/engine.py) trains it.
`register_dataset(DataSet(...))` adds a data set (vspec/train/data/registry.py)."""

from .._moved import moved as _moved
from .config import DataConfig, RunConfig, TrainConfig
from .data.registry import DataError, DataSet, register_dataset
from .recipes import RECIPES, Recipe, resolve
from .validators import ConfigError

__all__ = ["ConfigError", "DataConfig", "DataError", "DataSet", "RECIPES", "Recipe", "RunConfig", "TrainConfig",
           "register_dataset", "resolve", "run"]


def __getattr__(name: str):
    if name == "run":  # the loop imports torch: only when asked for
        from .engine import run  # torch

        return run
    return _moved(__name__, name)  # the previous releases' modules (vspec/_moved.py)
