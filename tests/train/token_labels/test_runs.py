"""Token labeling end to end (issue 46): `vspec label` writes the maps, `vspec train --token-labels DIR --recipe
refiner_advanced` trains a dense-head spec on them (flips, RandAugment, crops, mixup / cutmix, MixToken), a label
folder that does not match the data set is refused in one line, and a run killed and resumed equals the
uninterrupted one (labels and crops included)."""

import math
import subprocess
import sys

import pytest
import torch

import vspec
from tests.helpers import ROOT
from tests.helpers.image_runs import assert_same_weights, env, weights
from vspec.cli import main
from vspec.train import checkpoints
from vspec.train.token_labels.maps import read_label_map

TINY = {"depth": 2, "dim": 32, "block.attention.heads": 2, "img_size": 16, "embedder.patch_size": 4,
        "num_classes": 4, "head.dense": {}}  # a 4 x 4 token grid under a dense auxiliary head
DATA = ["--data", "synthetic", "--synthetic-size", "64", "--device", "cpu", "--seed", "3"]


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("spec") / "tiny_dense.json"
    path.write_text(vspec.to_json(vspec.override(vspec.load_spec(ROOT / "specs/deit_tiny.py"), TINY)))
    return path


@pytest.fixture(scope="module")
def labels(spec, tmp_path_factory):
    out = tmp_path_factory.mktemp("labels")
    assert main(["label", str(spec), *DATA, "--out", str(out), "--grid", "6", "--top-k", "3"]) == 0
    return out


def train_args(spec, labels, out, *extra):
    return [str(spec), *DATA, "--token-labels", str(labels), "--recipe", "refiner_advanced", "--batch-size", "16",
            "--epochs", "2", "--out", str(out), *extra]


def test_label_then_train_with_the_advanced_recipe(spec, labels, tmp_path, capsys):
    first = read_label_map(labels / "0" / "0000000.pt")  # image 0 is of class 0: synthetic's labels are i % 4
    assert first.shape == (2, 3, 6, 6) and set(first[1].unique().tolist()) <= {0.0, 1.0, 2.0, 3.0}
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(["train", *train_args(spec, labels, out, "--epochs", "1")]) == 0
    printed, err = capsys.readouterr()
    # the recipe's lr 5e-3 at batch 512, scaled to batch 16: 1.5625e-4
    # the class token's target is relabel_target's column 1 (the crop pooled to 1 x 1), not the label (issue 54)
    assert "note: the class_token head trains on 2 outputs: 1 x loss(cls, the crop's pooled teacher scores) + " \
           "0.5 x loss(aux, its token label at every token)" in err.splitlines()
    assert "note: 1 epoch < the recipe's 5 warmup epochs: the lr rises for the whole run, to about 20% of its " \
           "peak 0.000156, and never decays; --warmup-epochs sets a shorter warmup" in err.splitlines()
    assert printed.splitlines()[-1].startswith("done: 1 epoch, ")
    ckpt = checkpoints.load(out / "last.pt")
    assert ckpt["global_step"] == 4 and ckpt["data_args"]["token_labels"] == str(labels.resolve())
    assert ckpt["recipe"]["mixup"] == 0.8 and ckpt["recipe"]["drop_path_by_depth"] is True
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values() if v.is_floating_point())


def _refused(spec, labels, tmp_path, capsys, *extra):
    code = main(["train", *train_args(spec, labels, tmp_path / "refused", *extra)])
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if not line.startswith(("note:", "precision: ", "epoch "))]
    assert code == 2 and len(err) == 1, err
    return err[0]


def test_a_folder_that_does_not_match_the_data_set_is_refused_in_one_line(spec, labels, tmp_path, capsys):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(labels, bad)
    (bad / "1" / "0000005.pt").unlink()
    assert "0000005.pt" in _refused(spec, bad, tmp_path, capsys)
    shutil.rmtree(bad)
    shutil.copytree(labels, bad)
    other_grid = torch.stack([torch.zeros(3, 7, 7), torch.arange(3.0)[:, None, None].expand(3, 7, 7)])
    torch.save(other_grid, bad / "0" / "0000000.pt")  # the first map: another grid than the rest
    assert "7" in _refused(spec, bad, tmp_path, capsys)
    first = read_label_map(labels / "0" / "0000000.pt")
    first[1, 0, 0, 0] = 9  # a class index the data set's 4 classes do not have
    torch.save(first, bad / "0" / "0000000.pt")
    assert "9" in _refused(spec, bad, tmp_path, capsys)
    (bad / "0" / "0000000.pt").write_bytes(b"not a tensor")
    assert "0000000.pt" in _refused(spec, bad, tmp_path, capsys)
    assert "--dense-avg-pool: the pooled loss takes the image's target" in \
        _refused(spec, labels, tmp_path, capsys, "--dense-avg-pool")


def test_a_head_without_the_dense_head_is_refused(labels, tmp_path, capsys):
    path = tmp_path / "plain.json"
    plain = {k: v for k, v in TINY.items() if k != "head.dense"}
    path.write_text(vspec.to_json(vspec.override(vspec.load_spec(ROOT / "specs/deit_tiny.py"), plain)))
    assert "mix_token: MixToken mixes the tokens the dense auxiliary head scores" in \
        _refused(path, labels, tmp_path, capsys)
    code = main(["train", *train_args(path, labels, tmp_path / "refused", "--no-mix-token")])
    assert code == 2 and "no dense auxiliary head" in capsys.readouterr().err


def _train(spec, labels, out, *extra, kill_at=None):
    e = dict(env(), VSPEC_TEST_KILL_AT=kill_at) if kill_at else env()
    return subprocess.run([sys.executable, str(ROOT / "tools/train.py"), *train_args(spec, labels, out, *extra)],
                          env=e, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # ~25 s: four runs in subprocesses
def test_killed_and_stopped_mid_epoch_then_resumed_equals_the_uninterrupted_run(spec, labels, tmp_path):
    """4 steps an epoch, the images and their maps cropped, flipped and RandAugmented by 2 loader workers (each
    sample's draws from (seed, epoch, index)): SIGKILL at step 6 (mid epoch 2; last.pt is epoch 1's), the resumed
    run stopped by SIGTERM after its first step (last.pt mid epoch 2, with the RNG streams the mixing draws from),
    resumed again: the weights of the uninterrupted run."""
    ref, out = tmp_path / "ref", tmp_path / "cut"
    done = _train(spec, labels, ref, "--workers", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert _train(spec, labels, out, "--workers", "2", kill_at="step:6").returncode == -9
    assert checkpoints.load(out / "last.pt")["epoch"] == 1
    assert _train(spec, labels, out, "--workers", "2", "--resume", kill_at="step:1:TERM").returncode == 128 + 15
    assert (checkpoints.load(out / "last.pt")["epoch"], checkpoints.load(out / "last.pt")["batches_done"]) == (1, 1)
    done = _train(spec, labels, out, "--workers", "2", "--resume")
    assert done.returncode == 0, done.stderr[-2000:]
    assert_same_weights(weights(ref / "last.pt"), weights(out / "last.pt"))


def test_the_recipe_fields_reach_the_loss(labels, tmp_path, monkeypatch):
    """--cos-reg-component N turns the spec's attention maps on and reaches head_loss as n_comn; --annealing-weight
    scales the dense weight by the lr at each epoch's first step over the peak lr (the released rule), from the
    schedule; the loss stays finite."""
    from vspec.train import engine

    spec = tmp_path / "refiner_dense.json"
    refiner = vspec.override(vspec.load_spec(ROOT / "specs/compare_refiner.py"),
                             {"img_size": 16, "embedder.patch_size": 4, "in_chans": 3, "num_classes": 4,
                              "head.dense": {}})
    spec.write_text(vspec.to_json(refiner))
    seen, real = [], engine.head_loss

    def spy(criterion, outputs, target, **options):
        seen.append(options)
        return real(criterion, outputs, target, **options)

    monkeypatch.setattr(engine, "head_loss", spy)
    out = tmp_path / "run"
    argv = train_args(spec, labels, out, "--cos-reg-component", "2", "--annealing-weight", "--warmup-epochs", "1",
                      "--lr", "0.01", "--warmup-lr", "0.001")
    assert main(["train", *argv]) == 0
    assert [o["n_comn"] for o in seen] == [2] * 8 and not any(o["pooled"] for o in seen)
    # the lr at each epoch's first step (4 steps an epoch of 8): warmup from 1e-3 at step 0, then at step 4 the cosine
    # from 1e-2 to min_lr 1e-5 halfway through its 8 steps: 1e-5 + (1e-2 - 1e-5) x (1 + cos(pi x 4 / 8)) / 2
    second = (1e-5 + (1e-2 - 1e-5) * (1 + math.cos(math.pi * 4 / 8)) / 2) / 1e-2
    assert [o["dense_scale"] for o in seen] == pytest.approx([0.1] * 4 + [second] * 4)
    ckpt = checkpoints.load(out / "last.pt")
    assert vspec.from_json(ckpt["spec"]).attention_maps and vspec.from_json(ckpt["spec"]).head.mixes_tokens
