"""Token labeling's training data (issue 46): label maps moved with their images in the release's order, the
relabel mixup / cutmix, the label folder's checks. Exact against the release's outputs (the fixtures' relabel/,
from Refiner_ViT @ b3e8cb0) where they exist; the image side against timm's own pieces composed in the release's
order; the rest by properties on images and maps that encode their own coordinates."""

import json
import random

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms
from torchvision.datasets import ImageFolder

from tests.helpers.checks import FIXTURES
from vspec.train.checkpoints import rng_state, set_rng_state
from vspec.train.data.registry import DataError
from vspec.train.data.sources import ArrayImages
from vspec.train.data.transforms import build_transforms
from vspec.train.token_labels.dataset import TokenLabels, check_label_folder, label_op
from vspec.train.token_labels.maps import label_path, relabel_target
from vspec.train.token_labels.mix import RelabelMix
from vspec.train.validators import ConfigError

RA = "rand-m9-mstd0.5-inc1"


def fixture(name):
    return torch.load(FIXTURES / "relabel" / f"{name}.pt", weights_only=True)


def seed(s):
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)


def random_maps(n, k=5, hm=14, wm=14, classes=10, gen=None):
    gen = gen or torch.Generator().manual_seed(0)
    idx = torch.stack([torch.randperm(classes, generator=gen)[:k] for _ in range(n * hm * wm)])
    idx = idx.view(n, hm, wm, k).permute(0, 3, 1, 2).float()
    return torch.stack([torch.rand(n, k, hm, wm, generator=gen) * 9, idx], dim=1)  # (n, 2, k, hm, wm)


def write_maps(root, keys, maps):
    for key, m in zip(keys, maps):
        path = label_path(root, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(m.clone(), path)


def arrays(n=6, h=40, w=48, classes=10):
    rng = np.random.default_rng(0)
    return ArrayImages(rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8), [i % classes for i in range(n)])


def labelled(tmp_path, dataset, transform, maps=None, classes=10):
    keys = [f"{int(t)}/{i:07d}" for i, t in enumerate(dataset.targets)]
    write_maps(tmp_path, keys, random_maps(len(keys)) if maps is None else maps)
    return TokenLabels(dataset, tmp_path, transform, num_classes=classes)


# ---- RandAugment's label ops


@pytest.mark.parametrize("op", ["rotate", "rotate_neg", "shear_x", "shear_y", "translate_x_rel", "translate_y_rel"])
def test_label_ops_match_the_release(op):
    # a wrong matrix, rounding (floor(p + 0.5)) or edge rule (scores 0 outside, indices clamped) moves cells
    ra = fixture("align")["randaug"]
    name = {"rotate": "Rotate", "rotate_neg": "Rotate", "shear_x": "ShearX", "shear_y": "ShearY",
            "translate_x_rel": "TranslateXRel", "translate_y_rel": "TranslateYRel"}[op]
    src = fixture("align")["randaug_in"]
    got = label_op(name, ra[f"{op}_arg"], src)
    assert not torch.equal(got, src)
    assert torch.equal(got, ra[op])


def test_colour_ops_and_zero_magnitudes_leave_the_map():
    m = random_maps(1)[0]
    for name in ("ColorIncreasing", "Equalize", "SolarizeAdd"):
        assert label_op(name, 0.7, m) is m
    for name in ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"):
        assert torch.equal(label_op(name, 0.0, m), m)


# ---- the items


def release_folder(tmp_path, data, maps, sizes, keys):
    for key, (w, h) in zip(keys, sizes.tolist()):
        (tmp_path / "train" / key).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (w, h), (90, 30, 200)).save(tmp_path / "train" / key)
    write_maps(tmp_path / "labels", keys, maps)


def test_items_match_the_release_given_its_flips_and_crops(tmp_path):
    # the released order: flip the map's last axis, then the crop plane (fractions of the image, class at 5)
    data = fixture("label_format")
    release_folder(tmp_path, data, data["on_disk"], data["image_sizes_wh"], data["image_paths"])
    tf = build_transforms(data["crop_size"], 3, train=True, random_resized_crop=True)
    ds = TokenLabels(ImageFolder(str(tmp_path / "train")), tmp_path / "labels", tf, num_classes=data["num_classes"])
    assert ds.keys == data["image_paths"]
    for i in range(len(ds)):
        img, label = ds.dataset[i]
        assert label == data["targets"][i]
        x, got = ds.transform(img, ds.read(i), label, flip=bool(data["flipped"][i]), crop=data["crop_ijhw"][i].tolist())
        assert x.shape == (3, 32, 32)
        assert torch.equal(got, data["returned"][i])


def test_non_square_items_match_the_release(tmp_path):
    a = fixture("align")
    keys = [f"c{b}/img{b}.png" for b in range(4)]
    release_folder(tmp_path, a, a["a_in_maps"], a["a_image_sizes_wh"], keys)
    tf = build_transforms(a["crop_size"], 3, train=True, random_resized_crop=True, on_device=True)
    ds = TokenLabels(ImageFolder(str(tmp_path / "train")), tmp_path / "labels", tf, num_classes=10)
    for b in range(4):
        img, _ = ds.dataset[b]
        x, got = ds.transform(img, ds.read(b), b, flip=bool(a["a_flipped"][b]), crop=a["a_crop_ijhw"][b].tolist())
        assert x.dtype == torch.uint8 and x.shape == (3, 32, 32)  # the device path's uint8 image
        assert torch.equal(got, a["a_batch"][b])


def timm_pieces(tf):
    """build_transforms' timm pieces, composed in the release's order (flip, RandAugment, crop, the rest)."""
    by = {type(t).__name__: t for t in tf.transforms}
    head = [by["ConvertMode"], by["RandomHorizontalFlip"], by["RandAugment"], by["RandomResizedCropAndInterpolation"]]
    named = {type(h).__name__ for h in head}
    return transforms.Compose(head + [t for t in tf.transforms if type(t).__name__ not in named])


@pytest.mark.parametrize("on_device", [False, True])
def test_the_image_side_is_timms_transform_in_the_released_order(tmp_path, on_device):
    # a driver drawing in another order than timm's RandAugment (op choice, prob, magnitude noise, sign,
    # interpolation) or a crop drawn before the augmentation gives other images
    tf = build_transforms(24, 3, train=True, auto_augment=RA, re_prob=0.25, random_resized_crop=True,
                          on_device=on_device)
    ds = labelled(tmp_path, arrays(), tf)
    reference = timm_pieces(tf)
    for i in range(len(ds)):
        seed(i)
        want = reference(ds.dataset[i][0])
        seed(i)
        got, label = ds[i]
        assert torch.equal(got, want)
        assert label.shape == (3, 5, 14, 14)


def test_each_randaugment_step_moves_the_map_by_the_images_argument(tmp_path):
    # the label op of a step takes the sign and magnitude the image op drew (a second draw would differ)
    tf = build_transforms(24, 3, train=True, auto_augment=RA, random_resized_crop=True)
    ds = labelled(tmp_path, arrays(), tf)
    calls = []
    for op in ds.parts["augment"][0].ra.ops:
        def record(img, *args, _fn=op.aug_fn, _name=op.name, **kw):
            calls.append((_name, args))
            return _fn(img, *args, **kw)
        op.aug_fn = record
    moved = 0
    for s in range(40):
        calls.clear()
        seed(s)
        _, got = ds[s % len(ds)]
        torch.manual_seed(s)
        want = ds.read(s % len(ds))
        want = want.flip(-1) if torch.rand(1) < 0.5 else want  # the item's first torch draw: the flip
        for name, args in calls:
            want = label_op(name, args[0], want) if args else want
        moved += any(name in ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel") for name, _ in calls)
        assert torch.equal(got[:2], want)
    assert moved >= 5


def test_a_whole_image_crop_without_flip_is_the_identity_on_the_map(tmp_path):
    tf = build_transforms(16, 3, train=True, random_resized_crop=True)
    ds = labelled(tmp_path, arrays(2, 30, 20), tf)
    img, label = ds.dataset[1]
    m = ds.read(1)
    _, got = ds.transform(img, m, label, flip=False, crop=(0, 0, 30, 20))
    assert torch.equal(got[:2], m)
    assert got[2, 0, 0].tolist() == [0.0, 0.0, 1.0, 1.0, 0.0, 1.0] + [0.0] * 8
    assert not got[2].flatten()[6:].any()
    plain = TokenLabels(ds.dataset, tmp_path, build_transforms(16, 3, train=True), num_classes=10)  # no randomness
    x, again = plain[1]
    assert x.shape == (3, 16, 16) and torch.equal(again, got)


def test_the_flip_moves_image_and_map_alike(tmp_path):
    # flipping a flipped image and map gives the unflipped item: the map's flip axis is the image's
    tf = build_transforms(16, 3, train=True, random_resized_crop=True, on_device=True)
    ds = labelled(tmp_path, arrays(2, 30, 20), tf)
    img, label = ds.dataset[0]
    m = ds.read(0)
    seed(0)  # the colour jitter's draws
    x0, l0 = ds.transform(img, m, label, flip=False, crop=(3, 4, 20, 12))
    seed(0)
    x1, l1 = ds.transform(img.transpose(Image.FLIP_LEFT_RIGHT), m.flip(-1), label, flip=True, crop=(3, 4, 20, 12))
    assert torch.equal(x0, x1) and torch.equal(l0, l1)
    assert not torch.equal(ds.transform(img, m, label, flip=True, crop=(3, 4, 20, 12))[1], l0)


def test_the_crop_plane_holds_the_image_crop(tmp_path):
    # pixels encode their own (row, col); a nearest upsampling crop shows which rows and columns it took
    h, w = 20, 24
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    images = np.stack([np.stack([rows, cols, rows * 0], -1)] * 3).astype(np.uint8)
    from timm.data.transforms import RandomResizedCropAndInterpolation

    tf = transforms.Compose([RandomResizedCropAndInterpolation(32, interpolation="nearest"), transforms.PILToTensor()])
    ds = labelled(tmp_path, ArrayImages(images, [0, 1, 2]), tf)
    for s in range(20):
        seed(s)
        x, label = ds[s % 3]
        top, left, ch, cw = label[2, 0, 0, :4].tolist()
        assert x[0].min() == round(top * h) and x[0].max() == round((top + ch) * h) - 1
        assert x[1].min() == round(left * w) and x[1].max() == round((left + cw) * w) - 1
        assert 0.08 * 0.999 <= ch * cw <= 1 and 3 / 4 * 0.8 <= (cw * w) / (ch * h) <= 4 / 3 * 1.2
        assert label[2, 0, 0, 5] == s % 3


def test_items_resume_from_the_saved_rng_streams(tmp_path):
    # a transform with a private generator would repeat the first items' draws after the restore
    tf = build_transforms(16, 3, train=True, auto_augment=RA, re_prob=0.25, random_resized_crop=True)
    ds = labelled(tmp_path, arrays(), tf)
    seed(7)
    first = [ds[i] for i in range(3)]
    state = rng_state()
    rest = [ds[i] for i in range(3, 6)]
    seed(8)
    _ = ds[0]
    set_rng_state(state)
    again = [ds[i] for i in range(3, 6)]
    for (x, m), (y, n) in zip(rest, again):
        assert torch.equal(x, y) and torch.equal(m, n)
    assert not torch.equal(first[0][0], ds[0][0]) or not torch.equal(first[0][1], ds[0][1])


def test_transforms_that_would_leave_the_map_behind_are_refused(tmp_path):
    with pytest.raises(DataError, match="AutoAugment would move the image without its label map"):
        labelled(tmp_path, arrays(), build_transforms(16, 3, train=True, auto_augment="original"))
    tf = build_transforms(16, 3, train=True, random_resized_crop=True)
    with pytest.raises(DataError, match="--decode-on device"):
        TokenLabels(arrays(), tmp_path, tf, num_classes=10, decode_on="device")
    transformed = arrays()
    transformed.transform = tf
    with pytest.raises(DataError, match="hands over a Tensor, not a PIL image"):
        TokenLabels(transformed, tmp_path, tf, num_classes=10)[0]


# ---- the label folder


def folder(tmp_path, n=4, **kw):
    keys = [f"c{i % 2}/im{i}.x.png" for i in range(n)]
    write_maps(tmp_path, keys, random_maps(n, **kw))
    return keys


def test_a_matching_folder_gives_the_maps_shape(tmp_path):
    keys = folder(tmp_path, k=3, hm=7, wm=8)
    assert check_label_folder(tmp_path, keys, 10) == (3, 7, 8)


def test_missing_maps_are_refused_up_front_naming_one(tmp_path):
    keys = folder(tmp_path)
    label_path(tmp_path, keys[3]).unlink()
    with pytest.raises(DataError, match=r"c1/im3.pt: no label map for c1/im3.x.png \(1 of 4 images have none"):
        check_label_folder(tmp_path, keys, 10)
    with pytest.raises(DataError, match=r"c7/a.pt: no label map for c7/a.png \(1 of 4"):  # a class folder missing
        check_label_folder(tmp_path, keys[:3] + ["c7/a.png"], 10)
    with pytest.raises(DataError, match="no such label folder"):
        check_label_folder(tmp_path / "nope", keys, 10)


def record(root, **fields):
    (root / "labels.json").write_text(json.dumps(fields))


def test_labels_json_of_another_data_set_is_named_not_a_missing_map(tmp_path):
    """Maps `vspec label` made for another data set said "no label map for ..."; labels.json names the data set
    they are of. Without labels.json (LV-ViT's published maps) nothing changes."""
    keys = folder(tmp_path)
    ours = {"data": "imagefolder", "data_dir": str(tmp_path / "images")}
    record(tmp_path, data="digits", split="train", images=1437, classes=10)
    with pytest.raises(DataError) as info:
        check_label_folder(tmp_path, keys, 10, ours)
    assert str(info.value) == (f"{tmp_path}/labels.json: the maps here are of digits (train: 1,437 images, 10 classes),"
                               f" not of this run's imagefolder {tmp_path}/images (train: 4 images, 10 classes): label "
                               "this data set (vspec label), or give its label folder")
    record(tmp_path, data="imagefolder", classes=12)
    with pytest.raises(DataError, match=r"are of imagefolder \(12 classes\), not of this run's imagefolder"):
        check_label_folder(tmp_path, keys, 10, ours)
    with pytest.raises(DataError, match=r"are of imagefolder \(12 classes\), not of this run's data set \(train: 4 "):
        check_label_folder(tmp_path, keys, 10)  # the data set unknown (the Python API): the classes still
    record(tmp_path, data="imagefolder", data_dir=str(tmp_path / "images"), classes=10)
    assert check_label_folder(tmp_path, keys, 10, ours) == (5, 14, 14)
    (tmp_path / "labels.json").unlink()
    assert check_label_folder(tmp_path, keys, 10, {"data": "anything"}) == (5, 14, 14)


def test_a_missing_map_says_what_labels_json_knows_of_it(tmp_path):
    keys = folder(tmp_path)
    ours = {"data": "imagefolder", "data_dir": str(tmp_path / "b")}
    label_path(tmp_path, keys[3]).unlink()
    start = r"c1/im3.pt: no label map for c1/im3.x.png \(1 of 4 images have none\)"
    record(tmp_path, data="imagefolder", data_dir=str(tmp_path / "a"), split="train", images=3, classes=10, count=3)
    with pytest.raises(DataError, match=f"{start}; its labels.json says the maps are of imagefolder {tmp_path}/a "
                                        rf"\(train: 3 images, 10 classes\), this run reads imagefolder {tmp_path}/b "
                                        r"\(train: 4 images, 10 classes\)$"):
        check_label_folder(tmp_path, keys, 10, ours)
    record(tmp_path, data="imagefolder", data_dir=str(tmp_path / "b"), images=4, classes=10, count=3)
    with pytest.raises(DataError, match=f"{start}; its labels.json counts 3 of 4 maps written \\(run vspec label "
                                        r"again to go on\)$"):
        check_label_folder(tmp_path, keys, 10, ours)
    (tmp_path / "labels.json").unlink()
    with pytest.raises(DataError, match=f"{start}$"):
        check_label_folder(tmp_path, keys, 10, ours)


def test_two_images_named_to_one_map_are_refused(tmp_path):
    keys = folder(tmp_path)
    with pytest.raises(DataError, match=r"c0/im0.pt: the label map of both c0/im0.x.png and c0/im0.y.png"):
        check_label_folder(tmp_path, keys + ["c0/im0.y.png"], 10)


def test_another_grid_or_k_is_refused_when_read(tmp_path):
    tf = build_transforms(16, 3, train=True, random_resized_crop=True)
    ds = labelled(tmp_path, arrays(3), tf)
    for bad in (random_maps(1, k=4)[0], random_maps(1, hm=13)[0]):
        torch.save(bad, label_path(tmp_path, ds.keys[2]))
        with pytest.raises(DataError, match=r"0000002.pt: a \(2, .*\) label map, but the folder's first is "
                                            r"\(2, 5, 14, 14\)"):
            ds[2]


def test_another_class_count_is_refused(tmp_path):
    keys = folder(tmp_path)
    with pytest.raises(DataError, match="im0.pt: class index [5-9] is not one of the data set's 5 classes"):
        check_label_folder(tmp_path, keys, 5)
    tf = build_transforms(16, 3, train=True, random_resized_crop=True)
    ds = labelled(tmp_path, arrays(3), tf)
    m = ds.read(1)
    m[1, 0, 3, 3] = 10
    torch.save(m, label_path(tmp_path, ds.keys[1]))
    with pytest.raises(DataError, match="0000001.pt: class index 10 is not one of the data set's 10 classes"):
        ds[1]


def test_a_repeated_class_index_is_refused_when_read(tmp_path):
    """Checked as each map is read (in the loader), so that the training step need not read the batch back."""
    tf = build_transforms(16, 3, train=True, random_resized_crop=True)
    ds = labelled(tmp_path, arrays(3), tf)
    m = ds.read(1)
    m[1, 1, 3, 3] = m[1, 0, 3, 3]
    torch.save(m, label_path(tmp_path, ds.keys[1]))
    with pytest.raises(DataError, match="0000001.pt: a location repeats a class index"):
        ds[1]


def test_corrupt_maps_are_refused(tmp_path):
    keys = folder(tmp_path)
    label_path(tmp_path, keys[0]).write_bytes(b"not a tensor")
    with pytest.raises(DataError, match="im0.pt: not a readable label map"):
        check_label_folder(tmp_path, keys, 10)


def test_a_loader_stacks_the_maps(tmp_path):
    tf = build_transforms(16, 3, train=True, auto_augment=RA, random_resized_crop=True, on_device=True)
    ds = labelled(tmp_path, arrays(), tf)
    images, maps = next(iter(torch.utils.data.DataLoader(ds, batch_size=4)))
    assert images.shape == (4, 3, 16, 16) and images.dtype == torch.uint8
    assert maps.shape == (4, 3, 5, 14, 14) and maps.dtype == torch.float32
    assert maps[:, 2, 0, 0, 5].tolist() == [0, 1, 2, 3]
    assert relabel_target(maps, 10, label_size=4).shape == (4, 10, 18)


# ---- mixup / cutmix


def mix_from(args):
    return RelabelMix(args["num_classes"], mixup_alpha=args["mixup_alpha"], cutmix_alpha=args["cutmix_alpha"],
                      prob=args["prob"], switch_prob=args["switch_prob"], mode=args["mode"],
                      smoothing=args["label_smoothing"], label_size=args["label_size"], released_alignment=True)


@pytest.mark.parametrize("case", ["mixup", "cutmix"])
def test_mixing_matches_the_release(case):
    data = fixture("mixup")
    c, mix = data[case], mix_from(data["args"])
    np.random.seed(c["np_seed"])
    lam, box = mix.draw(16, 16)
    assert lam == c["lam_used"] and (box is not None) == c["use_cutmix"]
    if box is not None:
        assert list(box) == c["box_yl_yh_xl_xh"].tolist()
    np.random.seed(c["np_seed"])
    images, target = mix(data["in_images_uint8"], data["in_target"])  # the collate's uint8 path
    assert torch.equal(images, c["collate_out_images_uint8"])
    assert (target - c["collate_out_target"]).abs().max() < 1e-6
    np.random.seed(c["np_seed"])
    x, target = mix(c["tensor_in_x"], data["in_target"])  # the tensor path
    assert torch.equal(x, c["tensor_out_x"])
    assert (target - c["tensor_out_target"]).abs().max() < 1e-6


def test_mixing_off_gives_the_targets_of_lam_one():
    data = fixture("mixup")
    images, target = mix_from(dict(data["args"], prob=0.0))(data["in_images_uint8"], data["in_target"])
    assert (target - data["unmixed_target"]).abs().max() < 1e-6
    assert images is data["in_images_uint8"]
    state = np.random.get_state()[1].copy()
    off = mix_from(dict(data["args"], mixup_alpha=0.0, cutmix_alpha=0.0))
    assert (off(data["in_images_uint8"], data["in_target"])[1] - data["unmixed_target"]).abs().max() < 1e-6
    assert (np.random.get_state()[1] == state).all()  # alphas 0: nothing drawn


@pytest.mark.parametrize("mode", ["elem", "pair"])
def test_per_sample_modes_are_refused(mode):
    # the release fails on them (lam (B, 1) against (B, C, T)): "... must match the size of tensor b ..."
    assert "must match" in fixture("mixup")[f"{mode}_mode_error"]
    with pytest.raises(ConfigError, match=f"mixup mode: '{mode}' draws a lam per sample.*use mode 'batch'"):
        RelabelMix(10, mode=mode)


def test_cutmix_moves_the_partners_box_and_mixes_targets_by_its_area():
    b, h, w = 4, 12, 10
    grid = torch.arange(h * w, dtype=torch.float32).view(1, 1, h, w)
    images = (grid + 1000 * torch.arange(b).view(b, 1, 1, 1)).expand(b, 2, h, w).clone()
    maps = torch.cat([random_maps(b), torch.zeros(b, 1, 5, 14, 14)], dim=1)
    maps[:, 2, 0, 0, :4] = torch.tensor([0.1, 0.2, 0.5, 0.6])
    maps[:, 2, 0, 0, 5] = torch.arange(b).float()
    kept = maps.clone()
    mix = RelabelMix(10, mixup_alpha=0.0, cutmix_alpha=1.0, label_size=3)
    for s in range(10):
        np.random.seed(s)
        lam, (r0, r1, c0, c1) = mix.draw(h, w)
        np.random.seed(s)
        out, target = mix(images, maps)
        source = (out // 1000).long()  # the sample each pixel came from
        inside = torch.zeros(h, w, dtype=torch.bool)
        inside[r0:r1, c0:c1] = True
        assert (source[:, :, inside] == torch.arange(b - 1, -1, -1).view(b, 1, 1)).all()
        assert (source[:, :, ~inside] == torch.arange(b).view(b, 1, 1)).all()
        assert torch.equal(out % 1000, images % 1000)  # each pixel keeps its own coordinate
        assert lam == 1 - inside.sum().item() / (h * w)
        own = relabel_target(maps, 10, label_size=3)
        assert (target - (own * lam + own.flip(0) * (1 - lam))).abs().max() < 1e-6
    assert torch.equal(maps, kept)
