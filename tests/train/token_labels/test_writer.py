"""vspec/train/token_labels/writer.py: dense logits of every kind of model against each model's own head run on one
token at a time, the resampling and top-k against hand computations, and the written maps against the released
format (the fixtures' label_format.pt) and maps.read_label_map."""

import numpy as np
import pytest
import timm
import torch

import vspec
from tests.helpers import ROOT
from tests.helpers.checks import FIXTURES
from vspec.train.token_labels.maps import image_keys, label_path, read_label_map
from vspec.train.token_labels.writer import (
    LabelError,
    label_maps,
    pending,
    resample,
    save_map,
    score_maps,
    scorer,
    top_k,
    write_label_maps,
)

TINY = {"depth": 1, "dim": 32, "block.attention.heads": 2, "img_size": [16, 24], "embedder.patch_size": 4,
        "num_classes": 4}


def tiny(**changes):
    torch.manual_seed(0)
    spec = vspec.override(vspec.load_spec(ROOT / "specs/deit_tiny.py"), {**TINY, **changes})
    return vspec.build(spec).eval()


def per_token(model, images, head):
    """(B, C, h, w) logits: for every patch token, `head` (the model's own forward_head) run on the features with
    that token in the class token's place (a class-token head reads position 0)."""
    feats = model.forward_features(images)
    prefix = model.num_prefix_tokens if hasattr(model, "num_prefix_tokens") else 1
    outs = []
    for j in range(prefix, feats.shape[1]):
        moved = feats.clone()
        moved[:, 0] = feats[:, j]
        outs.append(head(moved))
    return torch.stack(outs, dim=-1)  # (B, C, N), raster order


@torch.no_grad()
def test_a_class_token_model_scores_each_patch_token_in_raster_order():
    model = tiny()
    images = torch.randn(2, 3, 16, 24)
    got = score_maps(model, images)
    assert got.shape == (2, 4, 4, 6)  # (B, C, rows, columns): a 16 x 24 image in 4 px patches
    want = per_token(model, images, model.forward_head).reshape(2, 4, 4, 6)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_the_dense_aux_head_gives_its_own_token_logits():
    model = tiny(**{"head.dense": {}})
    images = torch.randn(2, 3, 16, 24)
    model.train().set_training_outputs(True)  # no dropout in this spec: the aux logits (B, N, C) themselves
    aux = dict((o.name, o.logits) for o in model(images))["aux"]
    model.eval()
    want = aux.transpose(1, 2).reshape(2, 4, 4, 6)
    torch.testing.assert_close(score_maps(model, images), want)
    class_head = per_token(model, images, model.forward_head).reshape(want.shape)
    assert not torch.allclose(score_maps(model, images), class_head)  # the aux head, not the class token's


@torch.no_grad()
def test_a_gap_head_scores_each_token_and_its_mean_is_the_model_output():
    model = tiny(**{"head.kind": "gap"})
    images = torch.randn(2, 3, 16, 24)
    got = score_maps(model, images)
    torch.testing.assert_close(got.mean((2, 3)), model(images), rtol=1e-5, atol=1e-5)  # linear head: mean commutes
    feats = model.forward_features(images)
    for j in (0, 7, 23):  # a lone token pooled by the head is that token's logits
        torch.testing.assert_close(model.forward_head(feats[:, [0, 1 + j]]), got.flatten(2)[..., j], rtol=1e-5,
                                   atol=1e-5)


@torch.no_grad()
def test_a_timm_cnn_scores_every_location_with_its_classifier():
    torch.manual_seed(0)
    model = timm.create_model("resnet18", num_classes=7).eval()
    images = torch.randn(2, 3, 64, 96)
    got = score_maps(model, images)
    assert got.shape == (2, 7, 2, 3)
    feats = model.forward_features(images)
    for r in range(2):
        for c in range(3):  # the head's global pool over one location: that location's logits
            torch.testing.assert_close(got[:, :, r, c], model.forward_head(feats[:, :, r:r + 1, c:c + 1]),
                                       rtol=1e-4, atol=1e-5)


@torch.no_grad()
def test_a_timm_vit_scores_its_patch_tokens():
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", img_size=(32, 48), num_classes=5).eval()
    images = torch.randn(2, 3, 32, 48)
    got = score_maps(model, images)
    assert got.shape == (2, 5, 2, 3)
    torch.testing.assert_close(got, per_token(model, images, model.forward_head).reshape(2, 5, 2, 3), rtol=1e-4,
                               atol=1e-5)


def test_models_that_cannot_score_a_token_are_refused():
    with pytest.raises(LabelError, match="not one Linear"):
        scorer(tiny(**{"head.kind": "second_order"}))
    attn_pool = timm.create_model("vit_tiny_patch16_224", img_size=32, num_classes=5, global_pool="map").eval()
    score_maps(attn_pool, torch.randn(1, 3, 32, 32))  # a ViT's classifier still reads one token
    convnext = timm.create_model("convnext_atto", num_classes=5).eval()  # its head norms the pooled features
    with pytest.raises(LabelError, match="not global average pooling"):
        score_maps(convnext, torch.randn(1, 3, 64, 64))


def test_resample_pools_larger_maps_and_interpolates_smaller_ones_per_axis():
    x = torch.randn(1, 2, 28, 3)
    got = resample(x, (14, 6))
    pooled = x.reshape(1, 2, 14, 2, 3).mean(3)  # rows: 2 x 1 blocks averaged
    # columns 3 -> 6, bilinear with half-pixel centres: output j reads source (j + 0.5) / 2 - 0.5, clamped
    src = np.clip((np.arange(6) + 0.5) / 2 - 0.5, 0, 2)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, 2)
    t = torch.tensor(src - lo, dtype=torch.float32)
    want = pooled[..., lo] * (1 - t) + pooled[..., hi] * t
    torch.testing.assert_close(got, want)
    same = torch.randn(1, 2, 14, 14)
    assert torch.equal(resample(same, (14, 14)), same)
    odd = torch.randn(1, 1, 5, 14)  # 5 rows -> 2: adaptive bins [floor(i·5/2), ceil((i + 1)·5/2)) = [0, 3), [2, 5)
    torch.testing.assert_close(resample(odd, (2, 14)), torch.stack([odd[:, :, 0:3].mean(2), odd[:, :, 2:5].mean(2)], 2))


def test_top_k_keeps_the_best_scores_and_their_distinct_classes():
    scores = torch.tensor([[0.5, 2.0, -1.0, 2.0, 0.1]]).reshape(1, 5, 1, 1).expand(1, 5, 1, 6).contiguous()
    got = top_k(scores, 3)
    assert got.shape == (1, 2, 3, 1, 6) and got.dtype == torch.float32
    assert got[0, 0, :, 0, 0].tolist() == [2.0, 2.0, 0.5]
    assert sorted(got[0, 1, :2, 0, 0].tolist()) == [1.0, 3.0] and got[0, 1, 2, 0, 0] == 0.0  # ties: both classes
    with pytest.raises(LabelError, match="top-k 6: the model has 5 classes"):
        top_k(scores, 6)
    with pytest.raises(LabelError, match="width must be >= 6"):
        label_maps(lambda x: x, scores, (14, 5), 2)


def released_rules(m: torch.Tensor) -> None:
    """The on-disk layout every map keeps (README "On-disk label map"): (2, k, Hm, Wm), Wm >= 6, float32 as read,
    plane 1 integer class indices distinct at each location, plane 0 best first."""
    assert m.dim() == 4 and m.shape[0] == 2 and m.shape[3] >= 6 and m.dtype == torch.float32
    idx = m[1]
    assert torch.equal(idx, idx.round()) and (idx >= 0).all()
    assert (idx.sort(dim=0).values.diff(dim=0) != 0).all()
    assert (m[0].diff(dim=0) <= 0).all()


class Items(torch.utils.data.Dataset):
    """Images in memory with `targets` (image_keys names them `<class>/<index>`)."""

    def __init__(self, n, size=(16, 24)):
        g = torch.Generator().manual_seed(1)
        self.images, self.targets = torch.randn(n, 3, *size, generator=g), [i % 3 for i in range(n)]

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        return self.images[i], self.targets[i]


def test_written_maps_read_back_and_keep_the_released_layout(tmp_path):
    for m in torch.load(FIXTURES / "relabel/label_format.pt", weights_only=False)["on_disk"]:
        released_rules(m)  # the rules hold for the released maps: a fair check of ours
    model, data = tiny(), Items(5)
    written, skipped = write_label_maps(scorer(model), data, tmp_path, grid=(14, 14), k=3, batch_size=2)
    assert (written, skipped) == (5, 0)
    with torch.no_grad():
        want = top_k(resample(score_maps(model, data.images), (14, 14)), 3)
    for i, key in enumerate(image_keys(data)):
        got = read_label_map(label_path(tmp_path, key))
        released_rules(got)
        assert got.shape == (2, 3, 14, 14)
        torch.testing.assert_close(got, want[i])
    assert not (tmp_path / ".partial").exists()


def test_a_second_run_writes_only_the_missing_maps(tmp_path):
    model, data = tiny(), Items(7)
    paths = [label_path(tmp_path, k) for k in image_keys(data)]
    assert write_label_maps(scorer(model), data, tmp_path, grid=(6, 6), k=2, batch_size=3, limit=4) == (4, 0)
    assert [p.is_file() for p in paths] == [True] * 4 + [False] * 3  # a limit stops in order, as a kill would
    sentinel = torch.zeros(2, 2, 6, 6)
    torch.save(sentinel, paths[1])
    paths[2].unlink()
    (tmp_path / ".partial").mkdir()
    (tmp_path / ".partial" / "tmpkilled.pt").write_bytes(b"half a map")  # a killed run's temporary
    assert write_label_maps(scorer(model), data, tmp_path, grid=(6, 6), k=2, batch_size=3) == (4, 3)
    assert all(p.is_file() for p in paths) and torch.equal(torch.load(paths[1]), sentinel)
    assert not (tmp_path / ".partial").exists()
    assert write_label_maps(scorer(model), data, tmp_path, grid=(6, 6), k=2, batch_size=3, overwrite=True) == (7, 0)
    assert not torch.equal(torch.load(paths[1]), sentinel)


def test_a_failed_write_leaves_no_map(tmp_path, monkeypatch):
    def broken(obj, f):
        f.write(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(KeyboardInterrupt):
        save_map(torch.zeros(2, 1, 1, 6), tmp_path / "c" / "x.pt", tmp_path / ".partial")
    assert not (tmp_path / "c" / "x.pt").exists() and not list((tmp_path / ".partial").iterdir())


def test_two_images_with_one_map_name_are_refused(tmp_path):
    with pytest.raises(LabelError, match="cls/a.png and cls/a.jpg would both have the label map"):
        pending(["cls/a.png", "cls/a.jpg"], tmp_path)
    assert pending(["cls/a.png", "cls/b.png"], tmp_path) == [0, 1]
