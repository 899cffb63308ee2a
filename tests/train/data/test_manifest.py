"""--data shards' manifest and addresses (issue 54, items 1, 5, 7, 8, 9): a manifest is data, so names that are
not pack's never reach a shell, a parent folder or another host; fields of other types, nesting, endless or special
files, empty class or validation lists and patterns too large to expand are one line, before any model is built."""

import json
import os
import shutil

import pytest
from braceexpand import braceexpand

from tests.helpers.cli_corpus import run_case
from tests.helpers.data_corpus import special_file
from tests.helpers.shard_corpus import edited, injections
from tests.helpers.shard_runs import packed, streams
from vspec.train.data.loader import build_loaders
from vspec.train.data.manifest import MAX_SHARDS, _count, expand
from vspec.train.data.pack import MANIFEST, is_shard_name
from vspec.train.data.registry import DataError

FORMS = list(injections("val-000000.tar", "", ""))


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory):
    """48 training images in 8 shards of 6, 12 for validation in 2."""
    return packed(tmp_path_factory.mktemp("pack"))


@pytest.fixture
def copy(pack_dir, tmp_path):
    return shutil.copytree(pack_dir, tmp_path / "pack")


def read_all(data_dir):
    """Both splits of --data shards at `data_dir`, read to the end."""
    train, val, _ = streams(data_dir)
    for loader in build_loaders(train, val, batch_size=4, collate_fn=lambda b: b):
        list(loader)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("split", ["train", "val"])
def test_manifest_names_never_reach_a_shell(copy, tmp_path, split, form):
    """A `pipe:` --data-dir appends every name to the user's command: the old code ran `val-000000.tar; touch
    MARK` (and trained to the end, exit 0). Only pack's names are shard names: refused before anything is read."""
    marker = tmp_path / "MARK"
    name = injections(f"{split}-000000.tar", copy, marker)[form]
    edited(copy, lambda m: m[split][0].__setitem__("name", name))
    for data_dir in (f"pipe:cat {copy}", f"pipe:cat {copy}/train-{{000000..000007}}.tar"):
        with pytest.raises(DataError) as e:
            read_all(data_dir)
        assert str(e.value).startswith(f"shards: manifest pipe:cat {copy}/{MANIFEST}: {split}[0].name must be a "
                                       f"shard name as vspec data pack writes them ({split}-000000.tar, ...), each "
                                       f"once, got {repr(name)[:20]}")
    assert not marker.exists()


def test_shard_names_are_packs_own():
    for split, name in (("train", "train-000000.tar"), ("val", "val-000041.tar"), ("train", "train-1000000.tar")):
        assert is_shard_name(split, name)
    for split, name in (("val", "train-000000.tar"), ("train", "train-00000.tar"), ("train", "train-0000000.tar"),
                        ("train", "Train-000000.tar"), ("train", "train-000000.tar\n"), ("train", "train-000000.TAR"),
                        ("train", "./train-000000.tar"), ("train", 7), ("train", None), ("train", b"train-000000.tar")):
        assert not is_shard_name(split, name), name


@pytest.mark.parametrize("field, value, line", [
    ("count", "6", "train[1].count must be an int in [1, 2**31 - 1], got '6'"),
    ("count", 6.0, "train[1].count must be an int in [1, 2**31 - 1], got 6.0"),
    ("count", None, "train[1].count must be an int in [1, 2**31 - 1], got None"),
    ("count", True, "train[1].count must be an int in [1, 2**31 - 1], got True"),
    ("count", 2**70, "train[1].count must be an int in [1, 2**31 - 1], got an int of 71 bits"),
    ("sha256", 5, "train[1].sha256 must be 64 hex digits, got 5"),
    ("sha256", "A" * 64, f"train[1].sha256 must be 64 hex digits, got '{'A' * 64}'"),
    ("name", 7, "train[1].name must be a shard name as vspec data pack writes them (train-000000.tar, ...), each "
                "once, got 7"),
    ("name", "train-000000.tar", "train[1].name must be a shard name as vspec data pack writes them "
                                 "(train-000000.tar, ...), each once, got 'train-000000.tar'"),
])
def test_manifest_fields_of_another_type_are_one_line(copy, field, value, line):
    """The old code took them as they came: a TypeError or OverflowError traceback, or (a negative count, a name
    twice) a run that trained on what the manifest did not describe."""
    edited(copy, lambda m: m["train"][1].__setitem__(field, value))
    with pytest.raises(DataError) as e:
        streams(copy)
    assert str(e.value) == f"shards: manifest {copy}/{MANIFEST}: {line}"


def train_argv(tiny_spec, data_dir, out):
    return [str(tiny_spec), "--data", "shards", "--data-dir", str(data_dir), "--out", str(out), "--batch-size", "4",
            "--device", "cpu", "--epochs", "1"]


@pytest.mark.parametrize("change, line", [
    (lambda m: m.__setitem__("classes", []), "manifest {m}: classes must be a list of distinct class names, at "
                                             "least one, got []"),
    (lambda m: m.__setitem__("val", []), "{m} lists no validation shards: nothing would measure val_loss or pick "
                                         "best.pt; pack an image folder with val/<class>/ images (vspec data pack)"),
])
def test_no_classes_or_no_validation_is_refused_before_a_model_is_built(copy, tmp_path, tiny_spec, change, line):
    """`classes: []` built a 0-class model ("setting num_classes = 0"); `val: []` trained and reported `val_loss
    0.0000 val_top1 0.00` as if measured, and chose best.pt on it. `vspec data pack` refuses an empty val folder
    and `--data imagefolder` an empty val split, as timm's loader refuses a folder without images: so does a
    manifest, rather than training without validation."""
    edited(copy, change)
    outcome = run_case(train_argv(tiny_spec, copy, tmp_path / "run"), entry="train", limit=60)
    assert outcome.clean and outcome.stderr == f"train.py: error: shards: {line.format(m=copy / MANIFEST)}\n"
    assert not (tmp_path / "run" / "best.pt").exists()


def replaced(kind):
    def make(path):
        path.unlink()
        special_file(path, kind)
    return make


@pytest.mark.parametrize("make, data_dir, line", [
    (replaced("FIFO"), str, "{m} is a named pipe (FIFO), not a file"),
    (replaced("/dev/zero"), str, "{m} is a character device, not a file"),
    (lambda p: os.truncate(p, 100 << 20), str,
     "the manifest {m} is larger than 64 MiB: no manifest of vspec data pack"),
    (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), str,
     "cannot read the manifest {m}: JSON nested too deeply"),
    (lambda p: None, lambda d: f"pipe:cat /dev/zero #{d}",
     "the manifest pipe:cat /dev/zero #{m} is larger than 64 MiB: no manifest of vspec data pack"),
])
def test_a_manifest_that_never_ends_or_nests_deep_is_one_line(copy, tmp_path, tiny_spec, make, data_dir, line):
    """A FIFO blocked the open for ever, /dev/zero or `pipe:cat /dev/zero` filled the memory, 100,000 brackets
    were a RecursionError traceback: the manifest is read with a bound (64 MiB), local files only when regular."""
    make(copy / MANIFEST)
    outcome = run_case(train_argv(tiny_spec, data_dir(copy), tmp_path / "run"), entry="train", limit=60)
    assert outcome.clean and outcome.stderr == f"train.py: error: shards: {line.format(m=copy / MANIFEST)}\n", outcome


PATTERNS = ["train-{000000..000012}.tar", "a{1..10..3}b{x,y{1..3},}c", "{a..e}{Z..b..2}", "{4..-3}", "{07..10}",
            r"x\{1,2\}{a,b\}c}", "a}{b", "{}", "{x}", "{a,{b,c}d,{e..g}}{,z}", "{-01..3..2}", "::".join(["{1..3}"] * 2)]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_pattern_is_counted_as_braceexpand_expands_it(pattern):
    assert sum(_count(p) for p in pattern.split("::")) == sum(len(list(braceexpand(p))) for p in pattern.split("::"))
    assert expand(pattern) == [n for p in pattern.split("::") for n in braceexpand(p)]


@pytest.mark.parametrize("pattern, line", [
    ("train-{000000000..999999999}.tar", "expands to 1000000000 names, more than the 1,000,000 shards a pack may "
                                         "have"),
    ("train-{0..9999}{0..9999}.tar", "expands to 100000000 names, more than the 1,000,000 shards a pack may have"),
    (f"train-{{1..{MAX_SHARDS}}}.tar::train-0.tar", "expands to 1000001 names, more than the 1,000,000 shards"),
    ("train-" + "{a," * 9 + "b" + "}" * 9 + ".tar", "nests braces more than 8 deep"),
    ("train-{000000..000001.tar", "is no pattern of shards: Unbalanced braces: "),
    ("train-{0.." + "9" * 5000 + "}.tar", "is no pattern of shards: Exceeds the limit (4300 digits)"),
])
def test_a_pattern_too_large_to_expand_is_counted_first(tmp_path, pattern, line):
    """`train-{000000000..999999999}.tar` made its 10**9 names in memory before anything was read."""
    with pytest.raises(DataError, match=f"^shards: --data-dir '{tmp_path}/") as e:
        streams(f"{tmp_path}/{pattern}")
    assert line in str(e.value)


def test_a_long_data_dir_is_no_quadratic_search(tmp_path, tiny_spec):
    """The search for a shard's name in --data-dir started at every character: 100,000 characters took minutes."""
    outcome = run_case(train_argv(tiny_spec, tmp_path / ("x" * 100_000), tmp_path / "run"), entry="train", limit=60)
    assert outcome.clean and outcome.stderr.startswith(f"train.py: error: shards: cannot read the manifest {tmp_path}")


def test_a_pack_written_by_pack_reads_as_before(pack_dir):
    manifest = json.loads((pack_dir / MANIFEST).read_text())
    train, val, classes = streams(pack_dir)
    assert (len(train), len(val), classes) == (48, 12, 3) and [s["name"] for s in manifest["val"]] == [
        "val-000000.tar", "val-000001.tar"]
