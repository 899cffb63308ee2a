"""A training run's configuration: the spec, the `Recipe` (hyper-parameters, vspec/train/recipes.py), the data set's
own options (`DataConfig`) and how the run executes (`RunConfig`). Frozen attrs classes whose validators refuse a
bad value with one line naming the field (`ConfigError`, vspec/train/validators.py); `vspec train` builds the same
classes from its flags, so the command line and the Python API refuse the same values. Those flags are derived from
the fields: each field's metadata holds its flag's help (vspec/cli/fields.py). Torch-free.

    vspec.train.run(TrainConfig(spec, resolve("none", epochs=3), DataConfig("digits"), RunConfig(out="runs/x")))
"""

from __future__ import annotations

from pathlib import Path

import attrs

from ..spec import Model
from .data.registry import HF, entry, help_text, is_given, names, table
from .recipes import Recipe
from .text import GLUE_TASKS
from .validators import WORKERS, ConfigError, Is, OneOf, floats, ints, text_columns

__all__ = ["DataConfig", "PRECISIONS", "RunConfig", "TEXT_OPTIONS", "TrainConfig"]

_F = attrs.field
TEXT_OPTIONS = ("task", "tokenizer", "max_len", "text_columns")  # a text set's options
PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # --precision's values: auto, then those a run trains in
_SET_OPTIONS = HF  # options that only the sets whose entry `decides` them read: refused for the others


def _known(instance, attribute, value) -> None:
    if value not in names():
        raise ConfigError(attribute.name, f"unknown data set {value!r}; expected one of {', '.join(names())}")


@attrs.frozen
class DataConfig:
    """The data set (vspec/train/data/registry.py) and its own options: a text option (task, tokenizer, max_len,
    text_columns) given for an image set is refused, and the reverse (token_labels for a text set), and hf's options
    for another set.

    Args:
        name: the data set (`vspec.train.data.registry.names()`; `--data`).
        data_dir: its folder (cifar*, imagefolder; glue: the task's TSVs; hf: a save_to_disk folder, parquet / arrow
            files, or a Hub dataset id read from the local cache).
        subset: hf: a Hub dataset's configuration (HF's `name`; None: the only one).
        image_column: hf: the images' column (None: the one `Image` feature).
        label_column: hf: the labels' column (None: the one `ClassLabel` feature, else an integer column `label`).
        val_split: hf: the split validated on (None: validation, else test).
        streaming: hf, images: the split's files read as a stream (vspec/train/data/hf_stream.py).
        download: download CIFAR into `data_dir` when missing.
        synthetic_size: images in the synthetic training set.
        task: `glue`'s or `hf`'s GLUE task (`GLUE_TASKS`).
        tokenizer: a text set's tokenizer folder, or hf:ID (None: a WordPiece vocabulary trained into OUT/tokenizer).
        max_len: a text set's longest sequence in tokens (None: the spec's seq_len).
        text_columns: a Hugging Face text set's text column, or a pair's two (None: its task's, or its one string
            column).
        token_labels: a folder of per-image label maps (token labeling).
        inputs: the images' mean, std and interpolation (None: vspec's defaults).
    """

    name: str = _F(default="digits", validator=_known, metadata={"flag": "--data", "choices": names, "help": help_text})
    data_dir: str | None = _F(default=None, converter=attrs.converters.optional(str), metadata={
        "metavar": "DIR", "help": "dataset folder (cifar*, imagefolder, shards; glue: the task's TSVs); hf: a "
                                  "save_to_disk folder, parquet / arrow files (a folder, a file or a glob of them), or "
                                  "a Hub dataset id (owner/name) read from the local Hub cache, never downloaded"})
    subset: str | None = _F(default=None, validator=Is((str,), optional=True), metadata={
        "metavar": "NAME", "help": "--data hf: a Hub dataset's configuration (subset), the folder of its files "
                                   "(default: the only one, or the files outside any)"})
    image_column: str | None = _F(default=None, validator=Is((str,), optional=True), metadata={
        "metavar": "NAME", "help": "--data hf: the images' column (default: the one Image feature)"})
    label_column: str | None = _F(default=None, validator=Is((str,), optional=True), metadata={
        "metavar": "NAME", "help": "--data hf: the labels' column (default: the one ClassLabel feature, whose names "
                                   "are the classes; else an integer column named label: classes 0 to its largest)"})
    val_split: str | None = _F(default=None, validator=Is((str,), optional=True), metadata={
        "metavar": "NAME", "help": "--data hf: the split validated on, by Hugging Face's name (default: validation, "
                                   "else test); training reads train"})
    streaming: bool = _F(default=False, validator=Is((bool,)), metadata={
        "training_only": True,
        "help": "--data hf, images: read the split's parquet / arrow files as a stream, never whole: in an order "
                "shuffled by (seed, epoch), through a shuffle buffer, each row once an epoch over the processes and "
                "--workers; --resume mid-epoch is exact and keeps --workers"})
    download: bool = _F(default=False, validator=Is((bool,)), metadata={
        "help": "download CIFAR into --data-dir when missing"})
    synthetic_size: int = _F(default=1024, validator=ints(1), metadata={
        "metavar": "N", "help": "images in the synthetic training set (its validation set has N / 4)"})
    task: str | None = _F(default=None, validator=OneOf(GLUE_TASKS, optional=True), metadata={
        "help": "--data glue, or hf: the GLUE task (hf: its Hub columns and labels, the Hub GLUE's configuration "
                "folder; MNLI validated on validation_matched)"})
    tokenizer: str | None = _F(default=None, converter=attrs.converters.optional(str), metadata={
        "metavar": "DIR|hf:ID",
        "help": "text: a tokenizer folder (tokenizer.json, or a Hugging Face tokenizer's files), or hf:ID, a Hub "
                "repository's tokenizer through Hugging Face's cache (HF_HUB_OFFLINE honoured); default: with "
                "--pretrained, the weights' own tokenizer; else a WordPiece vocabulary trained on the training texts, "
                "saved in OUT/tokenizer"})
    max_len: int | None = _F(default=None, validator=ints(1, optional=True), metadata={
        "metavar": "N", "help": "text: truncate sequences to N tokens (default: the spec's seq_len); batches are "
                                "padded to their longest"})
    text_columns: tuple[str, ...] | None = _F(default=None, converter=text_columns, metadata={
        "metavar": "A[,B]",
        "help": "text, --data hf: the text column, or the pair's two (default: the --task's, as the Hub's GLUE names "
                "them; without --task the one string column); the label column is --label-column's (float scores: "
                "a regression, else classes: a ClassLabel's, integer indices or strings)"})
    token_labels: str | None = _F(default=None, converter=attrs.converters.optional(str), metadata={
        "metavar": "DIR", "training_only": True,
        "help": "images: token labeling (Refiner's advanced recipe, LV-ViT): a folder of per-image label maps in the "
                "released format (`vspec label` writes them; LV-ViT's published ImageNet maps are read as they are), "
                "the model's dense auxiliary head trained on them, cropped and flipped with each image"})
    # no flag of its own: --mean, --std, --interpolation, merged with the weights' (resolve_inputs)
    inputs: dict | None = _F(default=None, validator=Is((dict,), optional=True), metadata={"flag": None})

    def __attrs_post_init__(self):
        found = entry(self.name)
        given = next((f for f in TEXT_OPTIONS if getattr(self, f) is not None), None)
        if "text" not in found.modalities and given:
            raise ConfigError(given, f"for a text data set ({', '.join(names('text'))}); {self.name} holds images")
        if "image" not in found.modalities and self.token_labels is not None:
            raise ConfigError("token_labels", f"label maps of images; {self.name} holds texts")
        for option in _SET_OPTIONS:
            if is_given(getattr(self, option)) and option not in found.decides:
                sets = [d.name for d in table().values() if option in d.decides]
                raise ConfigError(option, f"for --data {' / '.join(sets)}, not {self.name}")


def _init(instance, attribute, value) -> None:
    if value is not None and not (isinstance(value, str) and value.startswith("hf:")):
        raise ConfigError("init", f"{value!r}: hf:DIR (a Hugging Face checkpoint folder)")


@attrs.frozen
class RunConfig:
    """How a run executes: where it writes, its seed, the data-loading processes, the device and precision, where
    images are normalised and JPEG files decoded, the batches fetched ahead, AdamW's kernel, a step limit, the
    progress lines and loss reads, the saved format and the starting weights.

    Args:
        out: the run's folder.
        resume: continue the run in `out` from its last.pt.
        overwrite: start afresh in an `out` that holds an earlier run.
        seed: the random seed.
        workers: data-loading processes (None: 0 on the CPU, the cores' share on CUDA).
        device: auto, cpu or cuda.
        precision: auto, fp32, bf16 or fp16 (auto: bf16 on CUDA and on a CPU with native bf16, else fp32).
        compile: torch.compile the model.
        accum_steps: gradient accumulation steps.
        channels_last: CUDA: the model and its image batches in channels-last memory format.
        normalise_on: where images are normalised: auto, host or device.
        decode_on: where JPEG files are decoded and augmented: auto, host or device.
        decode_in: with decode_on device, who decodes: auto, main or workers.
        prefetch: training batches fetched ahead by a thread (None: 2 with loader workers, else 0).
        adamw: AdamW's kernel: auto, fused or foreach.
        max_steps: stop after this many optimizer steps (None: the recipe's epochs).
        log_interval: seconds between progress lines off a terminal (None: one per epoch).
        loss_every: batches between reads of the losses (None: 1 on the CPU, 32 on CUDA).
        save_format: pt, or folder (also the model folders OUT/best and OUT/final).
        pretrained: a preset's published weights to start from: (name or .py file, True or a tag).
        init: a text body's starting weights from a Hugging Face folder, "hf:DIR".
    """

    out: Path = _F(default=Path("runs/train"), converter=Path, metadata={
        "required": True, "metavar": "DIR", "help": "output folder"})
    resume: bool = _F(default=False, validator=Is((bool,)), metadata={
        "help": "continue from OUT/last.pt (with the same spec, data and precision flags: a run that differs is "
                "refused; --precision auto keeps the checkpoint's)"})
    overwrite: bool = _F(default=False, validator=Is((bool,)), metadata={
        "help": "start afresh in an OUT that holds an earlier run, removing its files (without it such an OUT is "
                "refused)"})
    seed: int = _F(default=0, validator=ints(0, 2**32, open_high=True, label="2**32"), metadata={
        "help": "random seed (training, and the synthetic images)"})
    workers: int | None = _F(default=None, validator=WORKERS, metadata={
        "metavar": "N", "help": "data-loading processes (default: 0 on the CPU; on CUDA each process's share of the "
                                "cores, at most 8); at most 4 per core this process may use, and 32 anywhere"})
    device: str = _F(default="auto", validator=OneOf(("auto", "cpu", "cuda")), metadata={
        "help": "default: cuda when available"})
    precision: str = _F(default="auto", validator=OneOf(PRECISIONS), metadata={
        "help": "fp32, or mixed precision: bf16 / fp16 autocast (fp16 with a grad scaler), on the CPU too (bf16 "
                "emulated, slower than fp32, on a CPU without native bf16); auto (default): bf16 on CUDA and on a CPU "
                "that computes bf16 natively (AMX or AVX-512 BF16), fp32 on other CPUs; the run says its choice "
                "first and records it in summary.json and last.pt, and --resume keeps it"})
    compile: bool = _F(default=False, validator=Is((bool,)), metadata={"help": "torch.compile the model"})
    accum_steps: int = _F(default=1, validator=ints(1), metadata={"help": "gradient accumulation steps"})
    channels_last: bool = _F(default=True, validator=Is((bool,)), metadata={
        "help": "CUDA: the model and its image batches in channels-last memory format"})
    normalise_on: str = _F(default="auto", validator=OneOf(("auto", "host", "device")), metadata={
        "help": "images: normalised by the loader's workers (host) or, as uint8 batches, on the device (timm's "
                "prefetcher; random erasing there too); auto (default): device on CUDA, host on the CPU"})
    decode_on: str = _F(default="auto", validator=OneOf(("auto", "host", "device")), metadata={
        "help": "JPEG files (imagefolder): decoded and augmented by the loader's workers (host: Pillow and timm's "
                "transforms) or on the device (nvJPEG and the same augmentations as tensor operations, "
                "vspec/train/data/device_decode.py; the workers only read the files); auto (default): host (the "
                "device path is opt-in while an intermittent stall on CUDA is open, issue 47)"})
    decode_in: str = _F(default="auto", validator=OneOf(("auto", "main", "workers")), metadata={
        "help": "with --decode-on device: who decodes and augments the training batches: main (the training "
                "process, the next batch on a side stream; CUDA and nvJPEG set up once) or workers (each loader "
                "worker in a CUDA context of its own, the batches handed over by CUDA IPC: no decoding drains the "
                "step's queue, but every worker starts CUDA and nvJPEG: a slower start); auto (default): main"})
    prefetch: int | None = _F(default=None, validator=ints(0, 64, optional=True), metadata={
        "metavar": "N", "help": "training batches fetched ahead by a thread of their own while the step runs (on "
                                "CUDA also copied to the device on a side stream, as timm's prefetcher); 0: none; "
                                "default: 2 where the loader has workers, else 0 (the main process reads the data "
                                "and draws its augmentations between the steps)"})
    adamw: str = _F(default="auto", validator=OneOf(("auto", "fused", "foreach")), metadata={
        "help": "AdamW's update: fused (one kernel for every parameter) or foreach (torch's multi-tensor kernels); "
                "auto (default): fused on CUDA and under fp16 (its grad scaler then skips a bad step inside the "
                "kernel, with no host read), foreach otherwise"})
    max_steps: int | None = _F(default=None, validator=ints(1, optional=True), metadata={
        "help": "stop after N optimizer steps (smoke tests, benchmarks)"})
    log_interval: float | None = _F(default=30.0, validator=floats(0, open_low=True, optional=True), metadata={
        "metavar": "SECONDS",
        "help": "when the output is not a terminal (CI logs, redirected runs): a progress line every SECONDS "
                "(default 30) and one at the end of each epoch; a terminal redraws one line in place"})
    loss_every: int | None = _F(default=None, validator=ints(1, optional=True), metadata={
        "metavar": "N", "help": "read the losses on the host every N batches (default: 1 on the CPU, 32 on CUDA); a "
                                "non-finite loss stops the run at its own step either way"})
    save_format: str = _F(default="pt", validator=OneOf(("pt", "folder")), metadata={
        "help": "pt (default): the .pt checkpoints only; folder: also the best and the final weights as model "
                "folders OUT/best and OUT/final (config.json + model.safetensors; vspec.from_pretrained reads them); "
                "the .pt checkpoints stay, for --resume"})
    # no generated flag: --pretrained [TAG] (shared with eval and build) names the tag, SPEC the preset
    pretrained: tuple[str, bool | str] | None = _F(default=None, validator=Is((tuple,), optional=True),
                                                   metadata={"flag": None})
    init: str | None = _F(default=None, validator=_init, metadata={
        "metavar": "hf:DIR",
        "help": "start a text body from a Hugging Face checkpoint folder's body weights (save_pretrained's "
                "config.json + safetensors; no download); the spec's head starts fresh"})

    def __attrs_post_init__(self):
        if self.resume and self.overwrite:
            raise ConfigError("resume", "continues the run in out, overwrite replaces it: give one")
        if self.init is not None and self.pretrained is not None:
            raise ConfigError("init", "and pretrained both give the starting weights: give one")
        if self.decode_in != "auto" and self.decode_on != "device":
            raise ConfigError("decode_in", f"{self.decode_in!r} says who decodes on the device: give decode_on "
                                           "'device' too")


def _data(value):
    return DataConfig(value) if isinstance(value, str) else value


@attrs.frozen
class TrainConfig:
    """A run: the spec, the recipe, the data set (a `DataConfig`, or its name) and the run's execution.

    Args:
        spec: the model (`vspec.Model`).
        recipe: the hyper-parameters (`Recipe`: `vspec.train.resolve(name, **overrides)`).
        data: the data set and its options (`DataConfig`, or a data set's name).
        run: how the run executes (`RunConfig`).
    """

    spec: Model = _F(validator=Is((Model,)))
    recipe: Recipe = _F(validator=Is((Recipe,)))
    data: DataConfig = _F(factory=DataConfig, converter=_data, validator=Is((DataConfig,)))
    run: RunConfig = _F(factory=RunConfig, validator=Is((RunConfig,)))
