"""`vspec train`'s data, recipe and run flags are derived from the configuration's fields (vspec/cli/fields.py): every
field is a flag, and a field added to a class is one without editing the command."""

import re
from pathlib import Path

import attrs
import pytest

import vspec.cli.train as cli
from vspec.cli import main
from vspec.cli.fields import add_fields, field_rules, flag, given
from vspec.cli.train import config_from_args, train_parser
from vspec.train.config import DataConfig, RunConfig
from vspec.train.recipes import RECIPES, Recipe
from vspec.train.validators import ConfigError, Is, OneOf, floats, ints

TINY = str(Path(__file__).resolve().parents[2] / "specs/deit_tiny.py")
CLASSES = (Recipe, DataConfig, RunConfig)
# the fields with no generated flag, and why
NOT_GENERATED = {
    "inputs": "set by --mean, --std and --interpolation, merged with the published weights' (resolve_inputs)",
    "pretrained": "--pretrained [TAG] is written by hand (eval and build share it) and joins SPEC",
}


def help_of(capsys, *argv) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return capsys.readouterr().out


def test_every_field_of_the_configuration_is_a_flag_of_vspec_train(capsys):
    fields = [f for cls in CLASSES for f in attrs.fields(cls)]
    assert {f.name for f in fields if flag(f) is None} == set(NOT_GENERATED)
    shown = set(re.findall(r"--[a-z][a-z0-9-]*", help_of(capsys, "train")))
    missing = [f.name for f in fields if f.name not in NOT_GENERATED and flag(f) not in shown]
    assert not missing and "--pretrained" in shown and "--no-channels-last" in shown


def test_a_field_added_to_a_class_is_a_flag_without_editing_the_command(monkeypatch, capsys, tmp_path):
    @attrs.frozen
    class Run(RunConfig):
        decode_where: str = attrs.field(default="auto", validator=OneOf(("auto", "host", "device")),
                                        metadata={"help": "where images are decoded"})
        chunk: int = attrs.field(default=4, validator=ints(1), metadata={"flag": "--chunk-size", "metavar": "N",
                                                                         "help": "images per chunk"})

    monkeypatch.setattr(cli, "RunConfig", Run)
    text = help_of(capsys, "train")
    assert "--decode-where {auto,host,device}" in text and "where images are decoded" in text
    assert "--chunk-size N" in text and "images per chunk" in text
    argv = [TINY, "--out", str(tmp_path / "x"), "--decode-where", "host", "--chunk-size", "2"]
    run = config_from_args(train_parser().parse_args(argv)).run
    assert (run.decode_where, run.chunk, run.device) == ("host", 2, "auto")
    assert main(["train", *argv[:-1], "0"]) == 2  # refused by the field's validator, named by its flag
    assert capsys.readouterr().err == "vspec train: error: --chunk-size: must be >= 1, got 0\n"


@attrs.frozen
class MadeUp:
    """Every kind of field the generator turns into a flag."""

    steps: int = attrs.field(default=3, validator=ints(1))
    rate: float | None = attrs.field(default=0.5, validator=floats(0, optional=True), metadata={"off": 0.0})
    loud: bool = attrs.field(default=False, validator=Is((bool,)))
    fast: bool = attrs.field(default=True, validator=Is((bool,)))
    mode: str = attrs.field(default="a", validator=OneOf(("a", "b")))
    where: str = attrs.field(default="here", metadata={"flag": "--place", "metavar": "DIR", "help": "somewhere"})
    hidden: dict = attrs.field(factory=dict, metadata={"flag": None})


@pytest.mark.parametrize("unset", [False, True])
def test_the_generator_on_a_made_up_class(unset):
    p = cli.OneLineParser(prog="x")
    add_fields(p, MadeUp, unset=unset)
    args = p.parse_args([])
    assert given(MadeUp, args) == ({} if unset else {"steps": 3, "rate": 0.5, "loud": False, "fast": True,
                                                     "mode": "a", "where": "here"})
    args = p.parse_args(["--steps", "7", "--rate", "0", "--loud", "--no-fast", "--mode", "b", "--place", "d"])
    assert MadeUp(**given(MadeUp, args)) == MadeUp(7, None, True, False, "b", "d")
    assert set(field_rules(MadeUp)) == {"steps", "rate"}
    assert "--hidden" not in p.format_help()
    with pytest.raises(cli.UsageError, match="invalid choice"):
        p.parse_args(["--mode", "c"])


def recipe(tmp_path, *flags) -> Recipe:
    return config_from_args(train_parser().parse_args([TINY, "--out", str(tmp_path / "x"), *flags])).recipe


def test_recipe_flags_not_given_keep_the_named_recipes_values(tmp_path):
    assert recipe(tmp_path, "--recipe", "deit") == RECIPES["deit"]
    assert recipe(tmp_path, "--recipe", "deit", "--batch-size", "512").lr == RECIPES["deit"].lr / 2
    off = recipe(tmp_path, "--recipe", "deit", "--ema-decay", "0", "--clip-grad", "0", "--auto-augment", "none",
                 "--no-random-resized-crop", "--schedule", "linear", "--warmup-lr", "0")
    assert attrs.evolve(RECIPES["deit"], ema_decay=None, auto_augment=None, random_resized_crop=False,
                        schedule="linear", warmup_lr=0.0) == off
    assert recipe(tmp_path, "--recipe", "none", "--random-resized-crop").random_resized_crop is True


def test_a_config_error_names_the_flag_that_set_the_field():
    assert str(cli.config_error(ConfigError("name", "x"), "p")) == "p: error: --data: x"
    assert str(cli.config_error(ConfigError("ema_decay", "x"), "p")) == "p: error: --ema-decay: x"
    assert str(cli.config_error(ConfigError("crop_pct", "x"), "p")) == "p: error: --crop-pct: x"  # no field: as spelt
