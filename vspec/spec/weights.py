"""Published weights as data, declared beside a preset's SPEC (torch-free, as the spec).

A preset file with published weights holds `WEIGHTS = {tag: PublishedWeights(...), ...}`; the first tag is the default.
`vspec.create_model(name, pretrained=True | "<tag>")` fetches the source into the ecosystem's cache (Hugging
Face's `HF_HOME`, torch hub's `TORCH_HOME`), converts it with the named converter and keeps the converted model
folder in vspec's cache (`vspec.weights.published`).

Every image entry names its preprocessing (`Preprocess`: mean, std, crop fraction, interpolation, input size: what
timm calls a pretrained_cfg), every text entry its tokenizer: the inputs the weights were trained and evaluated on
travel with them (`model.pretrained_cfg`, model folders, checkpoints, `vspec eval`'s and `vspec train`'s defaults).

Sources: `Hub` (a file of a Hugging Face Hub repository), `Url` (a direct download, e.g. a GitHub release asset,
into torch hub's `checkpoints/`), `Manual` (a file behind a page a program cannot follow, a Google Drive or Baidu
link: the user downloads it and puts it where the one-line error says).
"""

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlparse

from attrs import field, frozen

from .._moved import moved as _moved
from .errors import SpecError, check

__all__ = [
    "CONVERTERS", "CROP_PCT", "DEFAULT_CROP_PCT", "Hub", "IMAGENET_MEAN", "IMAGENET_STD", "INCEPTION_MEAN",
    "INCEPTION_STD", "INPUTS", "INTERPOLATIONS", "Manual", "Preprocess", "PublishedWeights", "Url", "check_table",
    "inputs_cfg", "requested",
]
CONVERTERS = ("timm", "hf")  # besides a family's released converter (`vspec.convert.official()`)
HEX = frozenset("0123456789abcdef")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # timm's IMAGENET_DEFAULT_*
INCEPTION_MEAN = INCEPTION_STD = (0.5, 0.5, 0.5)  # timm's IMAGENET_INCEPTION_*: (x - 0.5) / 0.5
INTERPOLATIONS = ("bicubic", "bilinear", "nearest")  # timm's names (PIL's filters)
CROP_PCT = (0.25, 4.0)  # a crop fraction's range: the test-time resize stays within 4x the input size either way


def _name(value: str, what: str) -> str:
    if not value or value.strip() != value or any(c in value for c in "<>{}*?"):
        raise SpecError(what, f"{value!r} is no specific name (placeholders are not sources)")
    return value


def _sha256(_, attribute, value) -> None:
    if value is not None and (len(value) != 64 or not set(value) <= HEX):
        raise SpecError(attribute.name, f"{value!r} is not a sha256 hex digest (64 lower-case hex digits)")


@frozen
class Hub:
    """A file of a Hugging Face Hub repository (`hf_hub_download(repo, file, revision=revision)`); `config`: the
    repository's config.json that the converter reads too (Hugging Face models), None where it needs none;
    `sha256`: the file's published digest (its Git LFS sha256), checked where the cache cannot vouch for the file
    (one put where the error says); a download through Hugging Face's cache is checked against its blob's name."""

    repo: str = field(validator=check(str))
    file: str = field(validator=check(str))
    revision: str = field(default="main", validator=check(str))
    config: str | None = field(default=None, validator=check(str, optional=True))
    sha256: str | None = field(default=None, validator=[check(str, optional=True), _sha256])

    def __attrs_post_init__(self):
        _name(self.repo, "repo")
        _name(self.file, "file")
        if self.repo.count("/") > 1 or self.repo.startswith("/") or self.repo.endswith("/"):
            raise SpecError("repo", f"{self.repo!r}: a Hub repo id is 'name' or 'owner/name'")

    @property
    def where(self) -> str:
        """The file's page on the Hugging Face Hub."""
        return f"https://huggingface.co/{self.repo}/blob/{self.revision}/{self.file}"


@frozen
class Url:
    """A file downloadable by a program (`torch.hub.download_url_to_file`), kept under torch hub's
    `checkpoints/<file name>`; `sha256`: the file's published digest, checked when given."""

    url: str = field(validator=check(str))
    sha256: str | None = field(default=None, validator=[check(str, optional=True), _sha256])

    def __attrs_post_init__(self):
        _name(self.url, "url")
        parsed = urlparse(self.url)
        if parsed.scheme != "https" or not parsed.netloc or not PurePosixPath(parsed.path).name:
            raise SpecError("url", f"{self.url!r}: an https URL of one file")

    @property
    def file(self) -> str:
        """The file's name, the URL's last path part."""
        return PurePosixPath(urlparse(self.url).path).name

    @property
    def where(self) -> str:
        """The URL."""
        return self.url


@frozen
class Manual:
    """A file only a person can download (behind `page`: Google Drive, Baidu, ...): the user puts it at torch
    hub's `checkpoints/<file>`, which the error message names."""

    page: str = field(validator=check(str))
    file: str = field(validator=check(str))
    sha256: str | None = field(default=None, validator=[check(str, optional=True), _sha256])

    def __attrs_post_init__(self):
        _name(self.page, "page")
        _name(self.file, "file")
        if urlparse(self.page).scheme != "https" or "/" in self.file:
            raise SpecError("page", f"{self.page!r} / {self.file!r}: an https page and a bare file name")

    @property
    def where(self) -> str:
        """The page that says how to get the file."""
        return self.page


Source = Hub | Url | Manual


def _numbers(value) -> tuple:
    """A per-channel sequence as a tuple; a lone number is refused (one value per channel, as timm writes them)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise SpecError("mean / std", f"{value!r}: one number per channel, as a tuple (0.5, 0.5, 0.5)")
    return tuple(value)


def _channels(_, attribute, value) -> None:
    if not value or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 1e6 for v in value):
        raise SpecError(attribute.name, f"{value!r}: one number per channel")
    if attribute.name == "std" and min(value) <= 0:
        raise SpecError("std", f"{value!r}: every std must be > 0")


def _input_size(_, attribute, value) -> None:
    if len(value) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 65536 for v in value):
        raise SpecError("input_size", f"{value!r}: (channels, height, width), each an int > 0")


@frozen
class Preprocess:
    """The inputs published image weights were trained and evaluated on, in timm's pretrained_cfg terms: images
    normalised as (x - mean) / std per channel (x in [0, 1]); evaluated by resizing the shorter side to
    size / crop_pct with `interpolation`, then a centre crop to `input_size` (channels, height, width)."""

    mean: tuple[float, ...] = field(converter=_numbers, validator=_channels)
    std: tuple[float, ...] = field(converter=_numbers, validator=_channels)
    crop_pct: float = field(validator=check(float, ge=CROP_PCT[0], le=CROP_PCT[1]))
    interpolation: str = field(default="bicubic", validator=check(str, choices=INTERPOLATIONS))
    input_size: tuple[int, int, int] = field(default=(3, 224, 224), converter=tuple, validator=_input_size)

    def __attrs_post_init__(self):
        if not len(self.mean) == len(self.std) == self.input_size[0]:
            raise SpecError("mean", f"mean {self.mean}, std {self.std}: one of each per input channel "
                                    f"({self.input_size[0]})")

    def config(self) -> dict[str, Any]:
        """timm's pretrained_cfg fields (`timm.data.resolve_data_config` reads them from `model.pretrained_cfg`)."""
        return {"input_size": self.input_size, "interpolation": self.interpolation, "mean": self.mean,
                "std": self.std, "crop_pct": self.crop_pct, "crop_mode": "center"}


@frozen
class PublishedWeights:
    """One published checkpoint of a preset.

    source: where the file is. converter: "timm" (a timm state dict), "hf" (a Hugging Face model: its
    config.json is read too; `config` adds the fields an old config.json lacks, e.g. {"model_type": "bert"}) or
    a family's released converter ("t2t", "irpe", ...; `config` holds the released constructor's arguments the
    checkpoint was trained with). params: the parameter count of the model the
    preset builds with these weights (`create_model(name, pretrained=tag)` with no overrides), checked after
    every conversion. classes: the checkpoint's classifier size (0: none, a body published without a task head;
    the preset's head parts that the checkpoint lacks start fresh, as timm's and transformers' do). licence: of
    the weights. score: the reported accuracy ("ImageNet-1k top-1 72.2 (DeiT, Table 1)"), None where none was
    reported. unwrap: the keys of the file's top-level dict that hold the state dict, tried in order (released
    `.pth.tar` files wrap it: `state_dict_ema`, `model`, ...). tokenizer: the Hub id of a text model's tokenizer
    (required for "hf" entries). preprocess: an image model's inputs (`Preprocess`; required for image entries,
    from timm's pretrained_cfg for timm weights, from the released evaluation code for the others). notes:
    anything a user should know (how the checkpoint was trained, what differs from the paper)."""

    source: Source = field(validator=check((Hub, Url, Manual)))
    converter: str = field(validator=check(str))
    params: int = field(validator=check(int, ge=1))
    licence: str = field(validator=check(str))
    classes: int = field(default=1000, validator=check(int, ge=0))
    score: str | None = field(default=None, validator=check(str, optional=True))
    config: Mapping[str, Any] = field(factory=dict)
    unwrap: tuple[str, ...] = field(default=(), converter=tuple)
    tokenizer: str | None = field(default=None, validator=check(str, optional=True))
    preprocess: Preprocess | None = field(default=None, validator=check(Preprocess, optional=True))
    notes: str = field(default="", validator=check(str))

    def __attrs_post_init__(self):
        if self.converter == "hf" and (not isinstance(self.source, Hub) or self.source.config is None):
            raise SpecError("source", "a Hugging Face model comes from the Hub with its config: Hub(..., "
                                      "config='config.json')")
        if self.config and self.converter == "timm":
            raise SpecError("config", "the timm converter reads no constructor arguments")
        text = self.converter == "hf"
        if text and (self.tokenizer is None or self.preprocess is not None):
            raise SpecError("tokenizer", "a text model's weights name their tokenizer (tokenizer='<Hub id>') and no "
                                         "image preprocessing")
        if not text and self.preprocess is None:
            raise SpecError("preprocess", "image weights name the inputs they were trained on: preprocess="
                                          "Preprocess(mean, std, crop_pct, ...) (timm's pretrained_cfg, or the "
                                          "released evaluation code's)")

    def data_config(self) -> dict[str, Any]:
        """The weights' inputs: timm's pretrained_cfg fields for an image model, {"tokenizer": id} for a text one."""
        return {"tokenizer": self.tokenizer} if self.preprocess is None else self.preprocess.config()


DEFAULT_CROP_PCT = 0.875  # timm's (timm.data.DEFAULT_CROP_PCT), vspec's validation crop after random resized crops
INPUTS = "vspec_inputs"  # the pretrained_cfg key of inputs that are not the model's weights': "declared" | "default"


def inputs_cfg(spec: Any, name: str = "", tag: str = "", entry: PublishedWeights | None = None) -> dict[str, Any]:
    """timm's pretrained_cfg of a model that holds no published weights (`model.pretrained_cfg`, which
    `timm.data.resolve_data_config(model=m)` reads): the preprocessing its preset `name`'s weights `entry` (tagged
    `tag`) declare, marked `INPUTS: "declared"`, else vspec's default, marked "default" (ImageNet's mean and std for
    3 channels, 0.5 for others, bicubic, timm's 0.875 crop; a text body: no inputs); at the model's own size and
    classes. Declared inputs of other channels than the model's are not its own: the default then.

    Args:
        spec: the model spec.
        name: its preset's name ("": none).
        tag: the weights' tag ("": none).
        entry: the published-weights entry whose preprocessing is declared (None: vspec's default).
    """
    if entry is not None and entry.tokenizer is not None:  # a text body's weights: their tokenizer
        return {"architecture": name, "tag": tag, "num_classes": spec.num_classes, "tokenizer": entry.tokenizer,
                INPUTS: "declared"}
    if spec.embedder.text:
        return {"num_classes": spec.num_classes, INPUTS: "default"}
    declared = entry is not None and entry.preprocess.input_size[0] == spec.in_chans
    if declared:
        cfg = {"architecture": name, "tag": tag, **entry.preprocess.config()}
    else:
        mean, std = (IMAGENET_MEAN, IMAGENET_STD) if spec.in_chans == 3 else ((0.5,) * spec.in_chans,) * 2
        cfg = Preprocess(mean, std, DEFAULT_CROP_PCT, input_size=(spec.in_chans, 1, 1)).config()
    return {**cfg, "input_size": (spec.in_chans, *spec.img_size), "num_classes": spec.num_classes,
            INPUTS: "declared" if declared else "default"}


def requested(pretrained: object) -> bool:
    """Whether a `pretrained` argument asks for published weights: True or a tag; False (or None) does not. An empty
    tag or any other value is a one-line SpecError (an empty string is no tag, and not False either).

    Args:
        pretrained: the `pretrained` argument given.
    """
    if pretrained is None or pretrained is False:
        return False
    if pretrained is True or (isinstance(pretrained, str) and pretrained):
        return True
    raise SpecError("", f"pretrained={pretrained!r}: expected True (the default weights), a tag (`vspec weights` lists "
                        "them) or False")


def check_table(table: object, where: str) -> dict[str, PublishedWeights]:
    """A preset's WEIGHTS, checked: a non-empty dict of tag -> PublishedWeights (the first tag the default).

    Args:
        table: the preset's WEIGHTS as found.
        where: the preset's file, as messages name it.
    """
    if not isinstance(table, dict) or not table:
        raise SpecError("", f"{where}: WEIGHTS must be a non-empty dict of tag -> PublishedWeights")
    for tag, entry in table.items():
        if not isinstance(tag, str) or not tag or not all(c.isalnum() or c in "._-" for c in tag):
            raise SpecError("", f"{where}: WEIGHTS tag {tag!r}: letters, digits, '.', '_' and '-' only")
        if not isinstance(entry, PublishedWeights):
            raise SpecError("", f"{where}: WEIGHTS[{tag!r}] is a {type(entry).__name__}, not a PublishedWeights")
    return dict(table)


def __getattr__(name: str):  # PublishedWeights, PublishedWeights' old name (vspec/_moved.py)
    return _moved(__name__, name)
