"""A training run's configuration: the spec, the `Recipe` (hyper-parameters, vspec/train/recipes.py), the data set's
own options (`DataConfig`) and how the run executes (`RunConfig`). Frozen attrs classes whose validators refuse a
bad value with one line naming the field (`ConfigError`, vspec/train/rules.py); `vspec train` builds the same
classes from its flags, so the command line and the Python API refuse the same values. Torch-free.

    vspec.train.run(TrainConfig(spec, resolve("none", epochs=3), DataConfig("digits"), RunConfig(out="runs/x")))
"""

from __future__ import annotations

from pathlib import Path

import attrs

from ..spec import Model
from .datasets import entry, names
from .names import GLUE_TASKS
from .recipes import Recipe
from .rules import ConfigError, Is, OneOf, floats, ints

_F = attrs.field
_TEXT_OPTIONS = ("task", "tokenizer", "max_len")


def _known(instance, attribute, value) -> None:
    if value not in names():
        raise ConfigError(attribute.name, f"unknown data set {value!r}; expected one of {', '.join(names())}")


@attrs.frozen
class DataConfig:
    """The data set (`name`, vspec/train/datasets.py) and its own options: its folder and whether to fetch it
    there; synthetic's size; a text set's GLUE task, tokenizer folder (None: WordPiece trained into OUT/tokenizer)
    and longest sequence (None: the spec's seq_len); images' `inputs` (mean, std, interpolation:
    `vspec.train.inputs.resolve_inputs`; None: vspec's defaults). A text option given for an image set is
    refused."""

    name: str = _F(default="digits", validator=_known)
    data_dir: str | None = _F(default=None, converter=attrs.converters.optional(str))
    download: bool = _F(default=False, validator=Is((bool,)))
    synthetic_size: int = _F(default=1024, validator=ints(1))
    task: str | None = _F(default=None, validator=OneOf(GLUE_TASKS, optional=True))
    tokenizer: str | None = _F(default=None, converter=attrs.converters.optional(str))
    max_len: int | None = _F(default=None, validator=ints(1, optional=True))
    inputs: dict | None = _F(default=None, validator=Is((dict,), optional=True))

    def __attrs_post_init__(self):
        modality = entry(self.name).modality
        given = next((f for f in _TEXT_OPTIONS if getattr(self, f) is not None), None)
        if modality != "text" and given:
            raise ConfigError(given, f"for a text data set ({', '.join(names('text'))}); {self.name} holds images")


def _init(instance, attribute, value) -> None:
    if value is not None and not (isinstance(value, str) and value.startswith("hf:")):
        raise ConfigError("init", f"{value!r}: hf:DIR (a Hugging Face checkpoint folder)")


@attrs.frozen
class RunConfig:
    """How a run executes: where it writes (`out`; `resume` continues it, `overwrite` replaces an earlier run's
    files), its seed, the data-loading processes (None: 0 on the CPU, the cores' share on CUDA), the device and
    precision (auto: bf16 on CUDA, fp32 on the CPU; bf16 / fp16: autocast), torch.compile, accumulation steps,
    channels-last on CUDA, where images are normalised (host: the loader's workers; device: uint8 batches
    normalised on the device, as timm's prefetcher; auto: device on CUDA), where JPEGs are decoded and augmented
    (host: the workers; device: the device, vspec/train/gpu_data.py; auto: device on CUDA for the sets that hold
    JPEG files), a step limit (benchmarks, smoke tests),
    the seconds between progress lines off a TTY (None: one line per epoch), the batches between reads of the
    losses (None: 1 on the CPU, 32 on CUDA), the saved format (pt, or also model folders OUT/best and OUT/final),
    and the starting weights: a preset's published ones (`pretrained`: (name or .py file, True or a tag)) or a
    text body's from a Hugging Face folder (`init`: "hf:DIR")."""

    out: Path = _F(default=Path("runs/train"), converter=Path)
    resume: bool = _F(default=False, validator=Is((bool,)))
    overwrite: bool = _F(default=False, validator=Is((bool,)))
    seed: int = _F(default=0, validator=ints(0, 2**32, open_high=True, label="2**32"))
    workers: int | None = _F(default=None, validator=ints(0, optional=True))
    device: str = _F(default="auto", validator=OneOf(("auto", "cpu", "cuda")))
    precision: str = _F(default="auto", validator=OneOf(("auto", "fp32", "bf16", "fp16")))
    compile: bool = _F(default=False, validator=Is((bool,)))
    accum_steps: int = _F(default=1, validator=ints(1))
    channels_last: bool = _F(default=True, validator=Is((bool,)))
    normalise_on: str = _F(default="auto", validator=OneOf(("auto", "host", "device")))
    decode_on: str = _F(default="auto", validator=OneOf(("auto", "host", "device")))
    max_steps: int | None = _F(default=None, validator=ints(1, optional=True))
    log_interval: float | None = _F(default=30.0, validator=floats(0, open_low=True, optional=True))
    loss_every: int | None = _F(default=None, validator=ints(1, optional=True))
    save_format: str = _F(default="pt", validator=OneOf(("pt", "folder")))
    pretrained: tuple[str, bool | str] | None = _F(default=None, validator=Is((tuple,), optional=True))
    init: str | None = _F(default=None, validator=_init)

    def __attrs_post_init__(self):
        if self.resume and self.overwrite:
            raise ConfigError("resume", "continues the run in out, overwrite replaces it: give one")
        if self.init is not None and self.pretrained is not None:
            raise ConfigError("init", "and pretrained both give the starting weights: give one")


def _data(value):
    return DataConfig(value) if isinstance(value, str) else value


@attrs.frozen
class TrainConfig:
    """A run: the spec, the recipe, the data set (a `DataConfig`, or its name) and the run's execution."""

    spec: Model = _F(validator=Is((Model,)))
    recipe: Recipe = _F(validator=Is((Recipe,)))
    data: DataConfig = _F(factory=DataConfig, converter=_data, validator=Is((DataConfig,)))
    run: RunConfig = _F(factory=RunConfig, validator=Is((RunConfig,)))
