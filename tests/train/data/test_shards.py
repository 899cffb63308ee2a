"""--data shards and `vspec data pack` (issue 47, item 1): shards written and read back, split over processes and
workers with no sample lost or repeated, resumed exactly after SIGKILL and SIGTERM mid-epoch, and every bad shard
one line naming the shard and the member."""

import gc
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import warnings
from pathlib import Path

import pytest
import torch

from tests.helpers import ROOT
from tests.helpers.cli_corpus import run_case
from tests.helpers.data_corpus import special_file
from tests.helpers.image_runs import assert_same_weights, env, weights
from tests.helpers.shard_corpus import member_tar
from tests.helpers.shard_runs import CLASSES, image_folder, packed, streams
from vspec.cli import main as vspec_main
from vspec.cli.train import main as train_main
from vspec.train import checkpoints
from vspec.train.data.loader import build_loaders, set_epoch
from vspec.train.data.pack import MANIFEST, default_shard_size, pack
from vspec.train.data.registry import DataError
from vspec.train.data.shards import ShardStream

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


def as_list(batch):
    return batch


def digests(data_dir, world, workers, epoch=0, skip=0, batch=4, split="train"):
    """Per rank, the batches of an epoch as the images' sha256 (encoded items: the files' bytes)."""
    ranks = []
    for rank in range(world):
        train, val, _ = streams(data_dir)
        train_loader, val_loader = build_loaders(train, val, batch_size=batch, workers=workers, seed=5, rank=rank,
                                                 world_size=world, collate_fn=as_list)
        set_epoch(train_loader, epoch, skip * batch)
        loader = train_loader if split == "train" else val_loader
        got = [[hashlib.sha256(bytes(x.numpy())).hexdigest() for x, _ in b] for b in loader]
        assert len(got) == len(loader)
        ranks.append(got)
    return ranks


def files(folder, split):
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in (folder / split).rglob("*.jpg")}


def test_pack_writes_shards_and_a_manifest(tmp_path, capsys):
    images = image_folder(tmp_path / "images", per_class=5)
    out = tmp_path / "out"
    assert vspec_main(["data", "pack", str(images), str(out), "--shard-size", "4"]) == 0
    said = capsys.readouterr()
    # fewer shards than the default workers (at most 8 on CUDA): the command printed works as it is
    assert said.out == (f"{out}: training 15 images in 4 shards, validation 3 images in 1 shard, 3 classes, 4 "
                        f"images a shard; vspec train --data shards --data-dir {out}\n")
    assert "pack: train 15/15 images" in said.err
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["classes"] == list(CLASSES)
    assert [s["count"] for s in manifest["train"]] == [4, 4, 4, 3] and [s["count"] for s in manifest["val"]] == [3]
    for shard in manifest["train"] + manifest["val"]:
        assert hashlib.sha256((out / shard["name"]).read_bytes()).hexdigest() == shard["sha256"]
    with tarfile.open(out / "train-000000.tar") as tar:
        assert tar.getnames()[:2] == ["00000000.jpg", "00000000.cls"]
    again = tmp_path / "again"  # the same folder and seed: the same bytes
    pack(images, again, shard_size=4)
    assert (again / "train-000001.tar").read_bytes() == (out / "train-000001.tar").read_bytes()
    assert vspec_main(["data", "pack", str(images), str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not empty; pass --overwrite" in err
    assert vspec_main(["data", "pack", str(images), str(out), "--overwrite", "--shard-size", "100"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "train-000000.tar", "val-000000.tar"]


def test_pack_chooses_a_shard_size_of_at_least_8_shards_and_at_most_1_gib(tmp_path, capsys):
    """The default --shard-size gave 6 training shards for 5,120 images, and the default 8 workers refused them."""
    images = image_folder(tmp_path / "images", per_class=5)
    assert vspec_main(["data", "pack", str(images), str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out == (f"{tmp_path / 'out'}: training 15 images in 8 shards, validation 3 images in 2 shards, 3 classes, "
                   "2 images a shard (the default: at least 8 training shards, at most ~1 GiB each); vspec train "
                   f"--data shards --data-dir {tmp_path / 'out'}\n")
    assert json.loads((tmp_path / "out" / MANIFEST).read_text())["shard_size"] == 2
    assert [default_shard_size([1000] * n) for n in (1, 7, 8, 9, 5120)] == [1, 1, 1, 2, 640]
    # ImageNet's 1,281,167 training images at ~110 kB: a sample is 215 blocks of 512 bytes and 3 more (the two
    # members' headers and the label's block), 111,616 bytes; 9,619 of them fill 1 GiB (1,073,741,824 bytes)
    assert default_shard_size([110_000] * 1_281_167) == 9619
    assert default_shard_size([600 << 20] * 16) == 1  # 600 MiB images: one a shard


def test_fewer_shards_than_workers_train_on_a_worker_a_shard(tmp_path, capsys):
    """48 images in 2 training shards: 4 workers asked were a DataError (each worker needs one); now 2 workers
    read them, with a note, in the order 2 workers asked read them, resumed mid-epoch in that order too."""
    out = packed(tmp_path, shard_size=24)
    with warnings.catch_warnings():  # torch's note on more workers than cores
        warnings.simplefilter("ignore")
        epoch0 = digests(out, world=1, workers=4)
        assert capsys.readouterr().err == ("note: shards: 2 training shards for 1 process x 4 workers; each worker "
                                           "reads shards of its own: 2 workers a process (vspec data pack "
                                           "--shard-size: more shards)\n")
        assert epoch0 == digests(out, world=1, workers=2)
        assert sorted(h for b in epoch0[0] for h in b) == sorted(files(tmp_path / "images", "train"))
        assert digests(out, world=1, workers=4, skip=3) == [epoch0[0][3:]]
        capsys.readouterr()
        train, val, _ = streams(out)
        loader, val_loader = build_loaders(train, val, batch_size=4, workers=3, world_size=2, rank=1)
        assert (loader.num_workers, val_loader.num_workers) == (1, 1)  # none idle: 1 val shard, rank 0's
        assert capsys.readouterr().err == ""  # the note is rank 0's
        val = digests(out, world=2, workers=5, split="val")
        assert [len(rank) for rank in val] == [3, 0]
        assert {h for b in val[0] for h in b} == files(tmp_path / "images", "val")


def test_shards_read_back_decoded_and_encoded(tmp_path):
    out = packed(tmp_path, per_class=4, shard_size=5)
    train, val, classes = streams(out, encoded=False)
    assert (classes, len(train), len(val)) == (3, 12, 3)
    train_loader, val_loader = build_loaders(train, val, batch_size=4, workers=0)
    images, labels = next(iter(train_loader))
    assert images.shape == (4, 3, 8, 8) and images.dtype == torch.float32 and set(labels.tolist()) <= {0, 1, 2}
    assert sum(len(y) for _, y in val_loader) == 3 and len(val_loader) == 1
    # encoded: the image files' bytes, not decoded; every training image once an epoch
    got = [h for b in digests(out, 1, 0, batch=3)[0] for h in b]
    assert sorted(got) == sorted(files(tmp_path / "images", "train"))
    assert {h for b in digests(out, 1, 0, split="val")[0] for h in b} == files(tmp_path / "images", "val")


def test_two_processes_by_two_workers_lose_and_repeat_nothing(tmp_path):
    out = packed(tmp_path)  # 48 training images in 8 shards of 6
    epoch0 = digests(out, world=2, workers=2)
    seen = [h for rank in epoch0 for b in rank for h in b]
    assert [len(rank) for rank in epoch0] == [6, 6] and len(seen) == 48
    assert set(seen) == files(tmp_path / "images", "train")  # none lost, none twice
    assert digests(out, world=2, workers=2) == epoch0  # a function of (seed, epoch, processes, workers)
    assert digests(out, world=2, workers=2, epoch=1) != epoch0
    for skip in (1, 3):  # a resumed epoch: the batches not yet trained, in the same order
        assert digests(out, world=2, workers=2, skip=skip) == [rank[skip:] for rank in epoch0]
    val = [h for rank in digests(out, world=2, workers=2, split="val") for b in rank for h in b]
    assert sorted(val) == sorted(files(tmp_path / "images", "val"))


def test_a_pattern_of_shards_and_its_manifest_beside(tmp_path):
    out = packed(tmp_path)
    train, val, _ = streams(f"{out}/train-{{000000..000003}}.tar")
    assert len(train) == 24 and len(val) == 12
    train, _, _ = streams(f"pipe:cat {out}/train-{{000004..000007}}.tar")
    assert len(train) == 24 and len(next(iter(build_loaders(train, val, batch_size=4, collate_fn=as_list)[0]))) == 4
    with pytest.raises(DataError, match=r"train-000008.tar is not a training shard of the manifest"):
        streams(f"{out}/train-{{000007..000009}}.tar")
    with pytest.raises(DataError, match="no manifest"):
        streams(tmp_path)
    with pytest.raises(DataError, match=r"^shards: 8 training shards for 9 processes; each process needs one: fewer "
                                        r"processes, or pack smaller shards \(vspec data pack --shard-size\)$"):
        build_loaders(*streams(out)[:2], batch_size=4, workers=0, world_size=9, rank=8)


def rewrite(shard: Path, change):
    """The shard again, each member's bytes through change(name, data)."""
    members = []
    with tarfile.open(shard) as tar:
        for info in tar:
            members.append((info, change(info.name, tar.extractfile(info).read())))
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def break_label(out):
    rewrite(out / "train-000002.tar", lambda name, data: b"7" if name == "00000013.cls" else data)


def break_count(out):
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["train"][1]["count"] = 7
    (out / MANIFEST).write_text(json.dumps(manifest))


def break_digest(out):
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["train"][3]["sha256"] = "0" * 64
    (out / MANIFEST).write_text(json.dumps(manifest))


def truncate(out, inside=True):
    """train-000005.tar cut inside its third member (00000031.jpg), or before it."""
    with tarfile.open(out / "train-000005.tar") as tar:
        third = tar.getmembers()[2]
    data = (out / "train-000005.tar").read_bytes()
    (out / "train-000005.tar").write_bytes(data[:third.offset_data + 10 if inside else third.offset])


def cut_between(out):
    truncate(out, inside=False)


@pytest.mark.parametrize("damage, line", [
    (truncate, r"^shards: train-000005.tar: truncated or not a tar \(in member 00000031.jpg: "),
    (cut_between, r"^shards: train-000005.tar: holds 1 samples, the manifest says 6 \(truncated, or not the shard "),
    (break_label, r"^shards: train-000002.tar: 00000013.cls: label 7 is out of range for the manifest's 3 classes$"),
    (break_count, r"^shards: train-000001.tar: holds 6 samples, the manifest says 7 "),
    (break_digest, r"^shards: train-000003.tar: its sha256 \w+\.\.\. is not the manifest's 0+\.\.\.: the shard "),
])
def test_a_bad_shard_is_one_line_naming_it(tmp_path, damage, line):
    out = packed(tmp_path)
    damage(out)
    for workers in (0, 2):
        train, val, _ = streams(out)
        loader, _ = build_loaders(train, val, batch_size=4, workers=workers, collate_fn=as_list)
        with pytest.raises(DataError, match=line) as e:
            list(loader)
        assert "\n" not in str(e.value)


def replaced(out: Path, name: str, kind: str) -> Path:
    (out / name).unlink()
    return special_file(out / name, kind)


@pytest.mark.parametrize("name, kind, what", [
    ("train-000003.tar", "FIFO", "a named pipe (FIFO)"), ("train-000003.tar", "/dev/zero", "a character device"),
    ("val-000001.tar", "FIFO", "a named pipe (FIFO)"), ("val-000000.tar", "folder", "a folder"),
])
def test_a_shard_that_is_a_fifo_or_a_device_is_one_line(tmp_path, tiny_spec, name, kind, what):
    """A FIFO blocked the run for ever at its open; /dev/zero was hashed for ever."""
    out = packed(tmp_path)
    replaced(out, name, kind)
    outcome = run_case(run_args(tiny_spec, out, tmp_path / "run", "--workers", "0"), entry="train", limit=120)
    assert outcome.code == 2 and not outcome.hung and "Traceback" not in outcome.stderr  # the notes before it
    assert outcome.stderr.splitlines()[-1] == f"train.py: error: shards: {out / name} is {what}, not a file"


@pytest.mark.parametrize("sparse", [True, False])
def test_a_member_beyond_the_bound_is_refused_before_it_is_read(tmp_path, sparse):
    """A member whose header says 7 GiB (a sparse file: no disk written; or the header alone) is refused from its
    header: the old code read members whole into memory."""
    out = packed(tmp_path)
    member_tar(out / "train-000002.tar", 7 << 30, sparse=sparse)
    train, val, _ = streams(out)
    loader, _ = build_loaders(train, val, batch_size=4, collate_fn=as_list)
    with pytest.raises(DataError, match=r"^shards: train-000002.tar: member 00000000.jpg holds 7,516,192,768 bytes, "
                                        r"more than the 1 GiB a member may hold \(vspec data pack writes none "
                                        r"larger\)$"):
        list(loader)


def test_an_endless_stream_ends_at_its_bound_and_one_left_early_closes_quietly(tmp_path, monkeypatch):
    """`pipe:exec cat shard /dev/zero`: the tar, then zeros for ever, which the old code hashed for ever; read up
    to the worker's share (inside the shard) and left, its command stopped by the closed pipe (SIGPIPE; curl's
    exit 23) was a DataError raised while the generator closed ("Exception ignored in: <generator object
    _members>")."""
    out = packed(tmp_path)
    listed = json.loads((out / MANIFEST).read_text())["train"][0]
    shard = dict(listed, url=f"pipe:exec cat {out}/train-000000.tar /dev/zero")
    stream = ShardStream([shard], list(CLASSES), None, train=False, encoded=True, seed=0)
    with pytest.raises(DataError, match=r"^shards: train-000000.tar: more than 1 MiB after the tar's end: not the "):
        list(stream.loader(batch_size=4, workers=0, seed=0, rank=0, world_size=1, collate_fn=as_list))
    unraised = []
    monkeypatch.setattr(sys, "unraisablehook", unraised.append)
    stream = ShardStream([shard], list(CLASSES), None, train=True, encoded=True, seed=0)
    batches = list(stream.loader(batch_size=4, workers=0, seed=0, rank=0, world_size=1, collate_fn=as_list))
    gc.collect()
    assert [len(b) for b in batches] == [4] and unraised == []  # 4 of the shard's 6 samples


def test_a_shard_of_more_samples_or_members_than_listed_stops_at_the_first_extra(tmp_path):
    """An endless stream of samples, or of members that are no sample (folders), ends at the manifest's count."""
    out = packed(tmp_path)
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["train"][4]["count"] = 2
    (out / MANIFEST).write_text(json.dumps(manifest))
    with tarfile.open(out / "train-000001.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(49):
            folder = tarfile.TarInfo(f"{i}")
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)
    for shard, line in (("train-000004.tar", "holds more than the manifest's 2 samples"),
                        ("train-000001.tar", "more than 48 members for the manifest's 6 samples")):
        train, val, _ = streams(out)
        stream = ShardStream([s for s in train.shards if s["name"] == shard], list(CLASSES), None, train=False,
                             encoded=True, seed=0)
        with pytest.raises(DataError, match=f"^shards: {shard}: {line}"):
            list(stream.loader(batch_size=4, workers=0, seed=0, rank=0, world_size=1, collate_fn=as_list))


def test_pack_refuses_an_image_the_reader_would(tmp_path, capsys):
    images = image_folder(tmp_path / "images", per_class=1)
    os.truncate(images / "val" / "cat" / "000.jpg", (1 << 30) + 1)  # sparse: nothing written
    assert vspec_main(["data", "pack", str(images), str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (f"vspec data pack: error: {images}/val/cat/000.jpg is larger than 1 GiB, "
                                       "the most a shard's member may hold\n")


def test_pack_names_an_image_it_cannot_read(tmp_path, capsys):
    images = image_folder(tmp_path / "images", per_class=1)
    mem = images / "train" / "bee" / "000.jpg"
    mem.unlink()
    mem.symlink_to("/proc/self/mem")  # a regular file to stat, EIO to read
    assert vspec_main(["data", "pack", str(images), str(tmp_path / "out")]) == 2
    said = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("pack: train ")]
    assert said == [f"vspec data pack: error: {mem}: cannot be read (Input/output error)"]


def test_a_corrupt_jpeg_is_one_line_of_the_training_command(tmp_path, tiny_spec, capsys):
    images = image_folder(tmp_path / "images", per_class=4)
    (images / "train" / "bee" / "001.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a JPEG after all")
    pack(images, tmp_path / "out", shard_size=4)
    code = train_main([str(tiny_spec), "--data", "shards", "--data-dir", str(tmp_path / "out"), "--out",
                       str(tmp_path / "run"), "--batch-size", "4", "--device", "cpu", "--epochs", "1"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("train.py")]
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("train.py: error: shards: train-0000") and ".jpg is not a readable image" in err[0]


AUGMENT = ("--auto-augment", "rand-m9-mstd0.5-inc1", "--re-prob", "0.5", "--random-resized-crop")  # in the workers


def run_args(spec, data, out, *extra):
    return [str(spec), "--data", "shards", "--data-dir", str(data), "--out", str(out), "--batch-size", "8",
            "--device", "cpu", "--seed", "3", "--epochs", "2", "--workers", "2", *extra]


def train(spec, data, out, *extra, kill_at=None):
    """tools/train.py in its own process (one thread, as every run compared here: the same arithmetic)."""
    e = dict(env(), VSPEC_TEST_KILL_AT=kill_at) if kill_at else env()
    return subprocess.run([sys.executable, str(ROOT / "tools/train.py"), *run_args(spec, data, out, *extra)], env=e,
                          capture_output=True, text=True, timeout=300)


def test_killed_and_stopped_mid_epoch_then_resumed_equals_the_uninterrupted_run(tmp_path, tiny_spec):
    """48 images in 2 shards, in batches of 8 over the 2 workers of --workers 4 (one a shard): 6 steps an epoch,
    RandAugment, random erasing and crops drawn in the workers. SIGKILL at step 9 (mid epoch 2: last.pt is epoch
    1's), then the resumed run stopped by SIGTERM at the same step (last.pt records 3 batches of epoch 2, an odd count:
    the workers' turns rotate), then resumed again: the weights of the uninterrupted run."""
    data = packed(tmp_path, shard_size=24)
    ref, out = tmp_path / "ref", tmp_path / "cut"
    run = train(tiny_spec, data, ref, "--workers", "4", *AUGMENT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "note: shards: 2 training shards for 1 process x 4 workers; each worker reads shards of its own: 2 " \
           "workers a process" in run.stderr
    assert train(tiny_spec, data, out, "--workers", "4", *AUGMENT, kill_at="step:9").returncode == -9
    assert checkpoints.load(out / "last.pt")["epoch"] == 1
    cut = train(tiny_spec, data, out, "--workers", "4", *AUGMENT, "--resume", kill_at="step:3:TERM")  # steps 7-9
    assert cut.returncode == 128 + 15
    assert (checkpoints.load(out / "last.pt")["epoch"], checkpoints.load(out / "last.pt")["batches_done"]) == (1, 3)
    done = train(tiny_spec, data, out, "--workers", "4", *AUGMENT, "--resume")
    assert done.returncode == 0, done.stderr[-2000:]
    assert_same_weights(weights(ref / "last.pt"), weights(out / "last.pt"))
    assert checkpoints.load(out / "last.pt")["global_step"] == 12
    with pytest.raises(checkpoints.CheckpointError, match="--workers 3 != 4"):  # the order depends on the workers
        last = out / "last.pt"
        checkpoints.check_resume(checkpoints.load(last), last, *_spec_and_data(tiny_spec, data, out))


def _spec_and_data(spec, data, out):
    from vspec.cli.train import config_from_args, train_parser

    cfg = config_from_args(train_parser().parse_args(run_args(spec, data, out, "--workers", "3")), "train.py")
    return cfg.spec, checkpoints.data_args(cfg)


def test_two_processes_by_two_workers_under_torchrun(tmp_path, tiny_spec):
    data = packed(tmp_path)
    out = tmp_path / "ddp"
    done = subprocess.run([TORCHRUN, "--standalone", "--nproc_per_node=2", str(ROOT / "tools/train.py"),
                           *run_args(tiny_spec, data, out, "--epochs", "1")], capture_output=True, text=True,
                          timeout=300, env=env())
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["ranks_in_sync"] is True
    assert checkpoints.load(out / "last.pt")["global_step"] == 6  # 48 images, 24 a process, batches of 4 a process
