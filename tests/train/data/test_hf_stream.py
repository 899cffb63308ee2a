"""--data hf --streaming (issue 61, item 3): a split's parquet files read as a stream, split over processes and
workers so that every row is read once an epoch whatever the files' sizes, resumed mid-epoch exactly, each sample's
draws its row's (as the map-style path's), and every bad file one line naming it."""

import io
import json
import multiprocessing
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from tests.helpers import ROOT
from tests.helpers.hf_stream_runs import CLASSES, jpeg, parquet_split, recorded_rows, row_of
from tests.helpers.image_runs import assert_same_weights, env, weights
from vspec.train import checkpoints
from vspec.train.data.hf_stream import HFStream, layout
from vspec.train.data.loader import Seeded, build_loaders, set_epoch
from vspec.train.data.registry import DataError

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


@pytest.fixture(autouse=True)
def _offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def as_list(batch):
    return batch


def stream(files, train=True, encoded=True, transform=None, seed=5):
    return HFStream(files, list(CLASSES), transform, image="image", label="label", train=train, encoded=encoded,
                    seed=seed)


def rows(files, world, workers, epoch=0, skip=0, batch=4, split="train"):
    """Per rank, the batches of an epoch as the rows of their images."""
    ranks = []
    for rank in range(world):
        train_loader, val_loader = build_loaders(stream(files), stream(files, train=False), batch_size=batch,
                                                 workers=workers, seed=5, rank=rank, world_size=world,
                                                 collate_fn=as_list)
        set_epoch(train_loader, epoch, skip * batch)
        loader = train_loader if split == "train" else val_loader
        got = [[row_of(bytes(x.numpy())) for x, _ in b] for b in loader]
        assert len(got) == len(loader)
        ranks.append(got)
    return ranks


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():  # torch's note on more workers than cores
        warnings.simplefilter("ignore")
        yield


def flat(ranks):
    return [r for rank in ranks for b in rank for r in b]


def test_uneven_files_go_round_two_processes_by_two_workers_each_row_once(tmp_path):
    """48 rows in files of 7, 13, 3, 17 and 8 rows (row groups of 5): each process trains 6 batches of 4, every row
    once, in an order of (seed, epoch); a resumed epoch is the batches not yet trained; validation reads each once."""
    files = layout(parquet_split(tmp_path, [7, 13, 3, 17, 8], row_group=5), "image", "label", "train")
    assert [f["count"] for f in files] == [7, 13, 3, 17, 8] and [len(f["groups"]) for f in files] == [2, 3, 1, 4, 2]
    epoch0 = rows(files, world=2, workers=2)
    assert [len(rank) for rank in epoch0] == [6, 6] and sorted(flat(epoch0)) == list(range(48))
    assert rows(files, world=2, workers=2) == epoch0
    epoch1 = rows(files, world=2, workers=2, epoch=1)
    assert epoch1 != epoch0 and sorted(flat(epoch1)) == list(range(48))
    for skip in (1, 3):  # an odd count: the workers' turns rotate
        assert rows(files, world=2, workers=2, skip=skip) == [rank[skip:] for rank in epoch0]
    assert sorted(flat(rows(files, world=1, workers=3))) == list(range(48))
    val = rows(files, world=2, workers=2, batch=5, split="val")
    assert sorted(flat(val)) == list(range(48)) and [len(rank) for rank in val] == [5, 5]  # 24 rows each, 5 a batch


def test_rows_beyond_whole_batches_wait_for_another_epoch_none_read_twice(tmp_path):
    files = layout(parquet_split(tmp_path, [9, 9, 9, 5], row_group=2), "image", "label", "train")  # 32 rows
    left = set()
    for epoch in range(4):
        seen = flat(rows(files, world=3, workers=2, epoch=epoch, batch=3))  # 3 x 3 batches of 3: 27 rows
        assert len(seen) == len(set(seen)) == 27
        left |= set(range(32)) - set(seen)
    assert len(left) > 5  # not the same rows left out every epoch


def test_fewer_row_groups_than_processes_by_workers_each_row_once_with_a_note(tmp_path, capsys):
    files = layout(parquet_split(tmp_path, [24], row_group=100), "image", "label", "train")
    assert files[0]["groups"] == [24]
    got = rows(files, world=2, workers=2)
    assert sorted(flat(got)) == list(range(24))
    assert capsys.readouterr().err == ("note: hf: 1 row group for 2 processes x 2 workers; workers that share a row "
                                       "group each read all of it (more, smaller row groups read faster: "
                                       "to_parquet(batch_size=...))\n")


def test_a_training_samples_draws_are_its_rows_as_the_map_style_paths(tmp_path):
    """Decoded, transformed with a random draw: row i's draw in epoch e is the map-style path's (`Seeded`) for
    index i, whichever process and worker read it."""
    files = layout(parquet_split(tmp_path, [5, 7], row_group=3), "image", "label", "train")
    pixels = {np.asarray(Image.open(io.BytesIO(jpeg(i)))).tobytes(): i for i in range(12)}

    def draw(image):  # (the row, a draw)
        return pixels[np.asarray(image).tobytes()], float(torch.rand(()))

    class Rows:  # the map-style path's data set of the same rows
        def __len__(self):
            return 12

        def __getitem__(self, i):
            return draw(Image.open(io.BytesIO(jpeg(i))))

    expected = dict(Seeded(Rows(), 5)[(1, i)] for i in range(12))
    for world, workers in ((1, 0), (2, 2)):
        got = {}
        for rank in range(world):
            loader, _ = build_loaders(stream(files, encoded=False, transform=draw),
                                      stream(files, train=False, encoded=False, transform=draw), batch_size=3,
                                      workers=workers, seed=5, rank=rank, world_size=world, collate_fn=as_list)
            set_epoch(loader, 1)
            got.update(item for batch in loader for item, _ in batch)
        assert got == expected


AUGMENT = ("--auto-augment", "rand-m9-mstd0.5-inc1", "--re-prob", "0.5", "--random-resized-crop")  # in the workers


def torchrun(spec, data, out, rows, *extra, kill_at=None):
    """vspec train --data hf --streaming under torchrun, 2 processes (gloo) x 2 workers, the rows recorded."""
    e = dict(env(), VSPEC_TEST_KILL_AT=kill_at) if kill_at else env()
    rows.mkdir(exist_ok=True)
    return subprocess.run([TORCHRUN, "--standalone", "--nproc_per_node=2", "-m", "tests.helpers.hf_stream_runs",
                           str(rows), str(spec), "--data", "hf", "--data-dir", str(data), "--streaming", "--out",
                           str(out), "--batch-size", "8", "--device", "cpu", "--seed", "3", "--epochs", "2",
                           "--workers", "2", *AUGMENT, *extra], env=e, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_two_processes_by_two_workers_under_torchrun_each_row_once_then_killed_and_resumed_exactly(tmp_path,
                                                                                                    tiny_spec):
    """64 training rows in parquet files of 10, 22, 6 and 26 rows: under torchrun (--batch-size 8: 4 a process)
    each process trains 8 batches an epoch and, over the processes, every row once an epoch. SIGKILL at step 12 (mid
    epoch 2: last.pt is epoch 1's), the resumed run stopped by SIGTERM after 3 steps (last.pt records 3 batches of
    epoch 2, an odd count: the workers' turns rotate), resumed again: the uninterrupted run's weights, bit for
    bit."""
    data = tmp_path / "data"
    parquet_split(data, [10, 22, 6, 26])
    parquet_split(data, [12], split="validation", first=64)
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    run = torchrun(tiny_spec, data, ref, tmp_path / "rows")
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((ref / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["ranks_in_sync"] is True
    trained = recorded_rows(tmp_path / "rows")
    assert sorted(trained) == [0, 1]
    for epoch, ranks in trained.items():
        assert sorted(ranks) == [0, 1] and [len(ranks[r]) for r in (0, 1)] == [32, 32]
        assert sorted(ranks[0] + ranks[1]) == list(range(64)), epoch
    assert trained[0] != trained[1]
    assert torchrun(tiny_spec, data, cut, tmp_path / "cut_rows", kill_at="step:12").returncode != 0
    assert checkpoints.load(cut / "last.pt")["epoch"] == 1
    stopped = torchrun(tiny_spec, data, cut, tmp_path / "cut_rows", "--resume", kill_at="step:3:TERM")
    assert stopped.returncode != 0
    assert (checkpoints.load(cut / "last.pt")["epoch"], checkpoints.load(cut / "last.pt")["batches_done"]) == (1, 3)
    done = torchrun(tiny_spec, data, cut, tmp_path / "cut_rows", "--resume")
    assert done.returncode == 0, done.stderr[-3000:]
    assert checkpoints.load(cut / "last.pt")["global_step"] == 16
    assert_same_weights(weights(ref / "last.pt"), weights(cut / "last.pt"))
    from vspec.cli.train import config_from_args, train_parser

    for flags, refused in ((["--workers", "3"], "--workers 3 != 2"), ([], "--streaming false != true")):
        argv = [str(tiny_spec), "--data", "hf", "--data-dir", str(data), "--out", str(cut), *flags]
        if flags:
            argv.append("--streaming")
        cfg = config_from_args(train_parser().parse_args(argv), "train.py")
        with pytest.raises(checkpoints.CheckpointError, match=refused):  # the order depends on both
            checkpoints.check_resume(checkpoints.load(cut / "last.pt"), cut / "last.pt", cfg.spec,
                                     checkpoints.data_args(cfg))


def _rewrite(path, change):
    """A parquet file rewritten by pyarrow after `change(table)`, its Hugging Face metadata (features) kept."""
    table = pq.read_table(path)
    pq.write_table(change(table).replace_schema_metadata(table.schema.metadata), path, row_group_size=4)


def _corrupt_row_group(path, group):
    """The bytes of row group `group`'s image column overwritten (datasets stores them uncompressed)."""
    column = pq.ParquetFile(path).metadata.row_group(group).column(0)
    data = bytearray(Path(path).read_bytes())
    start = column.data_page_offset
    data[start:start + column.total_compressed_size] = b"\xff" * column.total_compressed_size
    Path(path).write_bytes(bytes(data))


def read_all(paths, world=1, workers=0):
    """Every batch of the split's epoch 0, decoded, over `world` processes x `workers`."""
    files = layout(paths, "image", "label", "train")
    for rank in range(world):
        loader, _ = build_loaders(stream(files, encoded=False), stream(files, train=False, encoded=False), batch_size=4,
                                  workers=workers, rank=rank, world_size=world, collate_fn=as_list)
        assert sum(len(batch) for batch in loader) == len(loader) * 4


@pytest.mark.parametrize("damage, line", [
    (lambda p: _rewrite(p[1], lambda t: t.set_column(0, "image", pa.array(["x"] * len(t)))),
     r"hf: \S+/train-00001.parquet: column 'image' holds string, not encoded images \(struct<bytes, path> or "
     r"binary\)$"),
    (lambda p: _rewrite(p[1], lambda t: t.drop_columns(["label"])),
     r"hf: \S+/train-00001.parquet: has no column 'label' \(the labels; its columns: image\)$"),
    (lambda p: _rewrite(p[0], lambda t: t.set_column(1, "label", pa.array([0.5] * len(t)))),
     r"train-00000.parquet: column 'label' holds double, not class indices \(integers\)$"),
    (lambda p: Path(p[2]).write_bytes(b"PAR1" + bytes(200)),
     r"hf: \S+/train-00002.parquet: not a parquet or arrow file datasets writes \("),
    (lambda p: _corrupt_row_group(p[1], 1),
     r"^hf: train-00001.parquet: row group 1 cannot be read \((OSError|ArrowInvalid): "),
    (lambda p: _rewrite(p[2], lambda t: t.set_column(1, "label", pa.array([0, 1, 3, 2], pa.int64()))),
     r"^hf: train-00002.parquet: row 2: label 3 is out of range: the classes are 0 to 2$"),
    (lambda p: _rewrite(p[2], lambda t: t.set_column(1, "label", pa.array([0, -1, 1, 2], pa.int64()))),
     r"^hf: train-00002.parquet: row 1: label -1 is negative \(ClassLabel's -1 is 'no label': an unlabelled "
     r"split\)$"),
    (lambda p: _rewrite(p[0], lambda t: t.set_column(1, "label", pa.array([0, None] + [1] * 6, pa.int64()))),
     r"^hf: train-00000.parquet: row 1 has no label \('label' is null\)$"),
    (lambda p: _rewrite(p[0], lambda t: t.set_column(0, "image", pa.array(
        [{"bytes": b"<html>", "path": None}] * len(t), t.schema.field("image").type))),
     r"^hf: train-00000.parquet: row \d: not an image file PIL reads \(corrupt, or another format\)$"),
])
def test_a_bad_file_is_one_line_naming_it(tmp_path, damage, line):
    """Read by 2 processes (the corrupt row group by 2 workers each: a worker's error, the same line, its loader's
    workers ended at once, not when the error's traceback is collected): the file's columns checked when the split
    is opened, its row groups and rows when they are read."""
    paths = parquet_split(tmp_path, [8, 12, 4])
    damage(paths)
    with pytest.raises(DataError) as e:
        read_all(paths, world=2, workers=2 if "row group" in line else 0)
    assert re.search(line, str(e.value)) and "\n" not in str(e.value), str(e.value)
    assert multiprocessing.active_children() == []


def test_an_empty_split_and_a_split_of_fewer_rows_than_a_batch_are_one_line(tmp_path):
    import datasets

    empty = parquet_split(tmp_path / "empty", [4])
    pq.write_table(pq.read_table(empty[0]).slice(0, 0), empty[0])
    with pytest.raises(DataError, match=r"^hf: train: the split holds no rows \(1 file\)$"):
        layout(empty, "image", "label", "train")
    del datasets
    with pytest.raises(DataError, match=r"^batch_size: 4 per rank is more than the 3 training samples per rank"):
        read_all(parquet_split(tmp_path / "small", [6]), world=2)


def test_streaming_needs_no_webdataset():
    """The streams are --data shards' (`ShardStream`), which reads its packs through webdataset: the `hf` extra
    alone (datasets, pyarrow) streams."""
    code = "import sys; sys.modules['webdataset'] = None; import vspec.train.data.hf_stream; print('read')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=120)
    assert done.returncode == 0 and done.stdout == "read\n", done.stderr[-2000:]
