"""`vspec label`: token-label maps of a tiny ImageFolder, the same images as a Hugging Face dataset, digits and
synthetic, by a vspec checkpoint, a spec and timm models by name; resume after a partial run; the one-line
refusals."""

import io
import json

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as TF
from PIL import Image, ImageOps

import vspec
from tests.helpers import ROOT
from tests.helpers.data_corpus import special_file
from tests.helpers.hf_data import from_folder, hub_cache, offline
from tests.helpers.label_corpus import _label, _setup, _train
from vspec.cli import main
from vspec.cli.eval import main as eval_main
from vspec.cli.train import main as train_main
from vspec.train.token_labels.maps import read_label_map
from vspec.train.token_labels.writer import resample, score_maps, top_k

TINY = {"depth": 1, "dim": 32, "block.attention.heads": 2, "img_size": 16, "embedder.patch_size": 4}
IMAGES = {"cls_a/a_001.png": (20, 30), "cls_a/a_002.png": (16, 16), "cls_b/b.001.png": (30, 12)}  # (W, H)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name, (w, h) in IMAGES.items():
            (root / split / name).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / split / name)
    return root


def checkpoint(path, classes, **changes):
    torch.manual_seed(0)
    spec = vspec.override(vspec.load_spec(ROOT / "specs/deit_tiny.py"), {**TINY, "num_classes": classes, **changes})
    return vspec.save(vspec.build(spec), path)


def label(*argv):
    return main(["label", *map(str, argv), "--device", "cpu"])


def spec_of(ckpt):
    """The checkpoint's spec as a file (what `vspec train` takes)."""
    path = ckpt.with_suffix(".json")
    path.write_text(vspec.to_json(vspec.load(ckpt).spec))
    return str(path)


def test_a_checkpoint_labels_an_image_folder_whole_images_resized(folder, tmp_path, capsys):
    ckpt = checkpoint(tmp_path / "m.pt", 2, **{"head.dense": {}})
    out = tmp_path / "labels"
    assert label(ckpt, "--data", "imagefolder", "--data-dir", folder, "--out", out, "--top-k", "2") == 0
    assert capsys.readouterr().out.strip().endswith("3 label maps written, 0 already there (2 logits at 14x14, "
                                                    "2 classes, imagefolder's 3 training images)")
    model = vspec.load(ckpt).eval()
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # vspec's defaults for 3 channels, bicubic
    for name, stem in (("cls_a/a_001.png", "cls_a/a_001"), ("cls_a/a_002.png", "cls_a/a_002"),
                       ("cls_b/b.001.png", "cls_b/b")):  # the released name: cut at the first dot
        img = Image.open(folder / "train" / name).convert("RGB")
        x = TF.normalize(TF.to_tensor(TF.resize(img, [16, 16], TF.InterpolationMode.BICUBIC)), mean, std)
        with torch.no_grad():
            want = top_k(resample(score_maps(model, x[None]), (14, 14)), 2)[0]
        torch.testing.assert_close(read_label_map(out / f"{stem}.pt"), want, rtol=1e-4, atol=1e-4)
    record = json.loads((out / "labels.json").read_text())
    assert record["grid"] == [14, 14] and record["top_k"] == 2 and record["classes"] == 2 and record["count"] == 3
    assert record["scores"] == "logits" and record["model"] == str(ckpt)
    run = tmp_path / "run"  # a training run's folder: its best.pt
    run.mkdir()
    (run / "best.pt").write_bytes(ckpt.read_bytes())
    assert label(run, "--data", "imagefolder", "--data-dir", folder, "--out", tmp_path / "again", "--top-k", "2") == 0
    assert torch.equal(read_label_map(tmp_path / "again/cls_b/b.pt"), read_label_map(out / "cls_b/b.pt"))


def test_a_limited_run_then_a_resumed_one_write_each_map_once(tmp_path, capsys):
    out, spec = tmp_path / "labels", tmp_path / "spec.json"
    spec.write_text(vspec.to_json(vspec.override(vspec.load_spec(ROOT / "specs/deit_tiny.py"),
                                                 {**TINY, "num_classes": 6})))
    common = [spec, "--data", "synthetic", "--synthetic-size", "24", "--out", out, "--grid", "6", "8"]
    assert label(*common, "--limit", "10", "--batch-size", "4") == 0
    assert "10 label maps written, 0 already there, 14 left for a later run" in capsys.readouterr().out
    maps = sorted(out.glob("*/*.pt"))
    assert len(maps) == 10 and read_label_map(maps[0]).shape == (2, 5, 6, 8)
    before = {p: p.read_bytes() for p in maps}
    deleted = read_label_map(maps[3])
    maps[3].unlink()
    assert label(*common) == 0
    assert "15 label maps written, 9 already there" in capsys.readouterr().out
    assert len(list(out.glob("*/*.pt"))) == 24
    assert all(p.read_bytes() == b for p, b in before.items() if p != maps[3])  # the others were not rewritten
    assert torch.equal(read_label_map(maps[3]), deleted)  # a spec's random weights are seeded (--seed)
    assert label(*common, "--grid", "7") == 2  # another labeling in the same folder
    assert "holds the maps of another labeling (grid [6, 8] there, [7, 7] now)" in capsys.readouterr().err
    assert label(*common, "--overwrite") == 0
    assert "24 label maps written, 0 already there" in capsys.readouterr().out


def test_timm_models_by_name_label_digits_and_a_folder(folder, tmp_path, capsys):
    assert label("timm:vit_tiny_patch16_224", "--img-size", "32", "--data", "digits", "--out", tmp_path / "vit",
                 "--limit", "20", "--grid", "6") == 0
    assert "20 label maps written" in capsys.readouterr().out
    got = read_label_map(tmp_path / "vit/0/0000017.pt")  # digits' names: <class>/<index>; image 17 is a 0
    assert got.shape == (2, 5, 6, 6) and got[1].max() < 10
    assert label("resnet18", "--img-size", "64", "--data", "imagefolder", "--data-dir", folder, "--out",
                 tmp_path / "cnn", "--top-k", "2") == 0
    assert "3 label maps written" in capsys.readouterr().out
    assert json.loads((tmp_path / "cnn/labels.json").read_text())["model"] == "timm:resnet18"
    assert read_label_map(tmp_path / "cnn/cls_b/b.pt").shape == (2, 2, 14, 14)


@pytest.mark.parametrize("argv, message", [
    (["--top-k", "5"], "--top-k 5: the model has 4 classes"),
    (["--grid", "14", "5"], "--grid 14 5: the maps' width must be >= 6"),
    (["--grid", "1", "2", "3"], "--grid takes H or H W, got 1 2 3"),
    (["--limit", "0"], "--limit: must be >= 1"),
    (["--data", "digits"], "digits has 10 classes, the model 4"),
    (["--grid", "1000000"], "--grid: must be in [1, 64], got 1000000"),  # allocated a map of 10^12 cells
    (["--grid", "6", "65"], "--grid: must be in [1, 64], got 65"),
    (["--mean", "1e308"], "--mean: must be a number float32 holds (0, or a magnitude from 1.175e-38 to 3.403e+38), "
                          "got 1e+308"),  # inf in float32: every map NaN, exit 0
    (["--std", "1e-50"], "--std: must be a number float32 holds (a magnitude from 1.175e-38 to 3.403e+38), got 1e-50"),
    (["--mean", "1e10", "--std", "1e-30"], "--mean / --std: (x - mean) / std reaches 1e+40 with mean 1e+10 and std "
                                           "1e-30 (channel 0; pixels x in [0, 1]): beyond float32's 3.403e+38"),
])
def test_refusals_are_one_line(tmp_path, capsys, argv, message):
    ckpt = checkpoint(tmp_path / "m.pt", 4)
    defaults = ["--data", "synthetic", "--synthetic-size", "8", "--top-k", "2"]
    assert label(ckpt, *defaults, "--out", tmp_path / "o", *argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("vspec label: error: "), err


def test_models_without_a_token_classifier_are_refused(tmp_path, capsys):
    ckpt = checkpoint(tmp_path / "sot.pt", 4, **{"head.kind": "second_order"})
    assert label(ckpt, "--data", "synthetic", "--out", tmp_path / "o") == 2
    assert "its classifier (SumOfClassifiers) is not one Linear" in capsys.readouterr().err
    assert label("bert_base", "--data", "synthetic", "--out", tmp_path / "o") == 2
    assert "a text body (token labels are for image models)" in capsys.readouterr().err
    assert label("no_such_model_anywhere", "--data", "synthetic", "--out", tmp_path / "o") == 2
    assert "neither a vspec preset nor a timm model" in capsys.readouterr().err


def test_an_empty_out_is_refused_not_the_working_folder(tmp_path, capsys, monkeypatch):
    """`--out ""` is Path(".") once parsed: the maps went into the working folder."""
    ckpt = checkpoint(tmp_path / "m.pt", 4)
    monkeypatch.chdir(tmp_path)
    assert label(ckpt, "--data", "synthetic", "--synthetic-size", "8", "--top-k", "2", "--out", "") == 2
    assert capsys.readouterr().err == "vspec label: error: --out '': an empty path; give a folder ('.' for the " \
                                      "working folder)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


def test_maps_whose_scores_overflow_are_not_written(tmp_path, capsys):
    """Finite weights whose logits overflow float32 (as --mean 1e308 made every input inf): the map is refused
    naming it, before it is written, so no run skips a NaN map later; nothing is written, labels.json neither."""
    ckpt = checkpoint(tmp_path / "m.pt", 4)
    model = vspec.load(ckpt)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(1e30)
    huge = vspec.save(model, tmp_path / "huge.pt")
    out = tmp_path / "o"
    for _ in range(2):  # a rerun refuses them again: nothing was written to skip
        assert label(huge, "--data", "synthetic", "--synthetic-size", "8", "--top-k", "2", "--out", out) == 2
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"vspec label: error: {out}/0/0000000.pt: not written: the model's scores of 0/0000000 are NaN or infinite "
            "(its weights or its inputs overflow float32)")
    assert not list(out.rglob("*.pt")) and not (out / "labels.json").exists()


@pytest.mark.parametrize("kind,why", [("FIFO", "is a named pipe (FIFO), not an image file"),
                                      ("/proc/self/mem", "not a readable image (Input/output error)"),
                                      ("random bytes", "not an image file PIL reads (corrupt, or another format)")])
def test_an_image_no_reader_can_use_is_one_line_naming_it(folder, tmp_path, capsys, kind, why):
    """A FIFO hung `vspec label` (and `vspec train --data imagefolder`, which ignored SIGTERM meanwhile); the
    others named no file ("[Errno 5] Input/output error", "cannot identify image file <_io.BufferedReader ...>")."""
    import shutil

    images = tmp_path / "images"
    shutil.copytree(folder, images)
    path = images / "train" / "cls_a" / "a_002.png"
    path.unlink()
    if kind == "random bytes":
        path.write_bytes(b"\x89PNG not really")
    else:
        special_file(path, kind)
    ckpt = checkpoint(tmp_path / "m.pt", 2)
    assert label(ckpt, "--data", "imagefolder", "--data-dir", images, "--out", tmp_path / "o", "--top-k", "2") == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"vspec label: error: {path}: {why}"
    assert main(["train", spec_of(ckpt), "--data", "imagefolder", "--data-dir", str(images), "--out",
                 str(tmp_path / "r"), "--batch-size", "3", "--device", "cpu"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"vspec train: error: {path}: {why}"


def test_a_rerun_refuses_a_labels_json_it_cannot_read(tmp_path, capsys):
    """labels.json a FIFO hung the rerun; JSON of another shape was a traceback (`.get` of a list)."""
    ckpt = checkpoint(tmp_path / "m.pt", 4)
    common = [ckpt, "--data", "synthetic", "--synthetic-size", "8", "--top-k", "2", "--out", tmp_path / "o"]
    assert label(*common) == 0
    record = tmp_path / "o" / "labels.json"
    for make, why in ((lambda: special_file(record, "FIFO"), "is a named pipe (FIFO), not a labels.json file"),
                      (lambda: record.write_text("[1, 2]"), "not a JSON object (an array), as vspec label writes"),
                      (lambda: special_file(record, "/dev/zero"), "is a character device, not a labels.json file")):
        record.unlink()
        make()
        assert label(*common) == 2
        assert capsys.readouterr().err.splitlines()[-1] == f"vspec label: error: {record}: {why}"


def test_labels_json_names_the_data_set_and_training_on_another_says_so(folder, tmp_path, capsys):
    """Maps made for one data set, given to a run on another, said "no label map for ..."."""
    ckpt = checkpoint(tmp_path / "m.pt", 2, **{"head.dense": {}})
    out = tmp_path / "labels"
    assert label(ckpt, "--data", "imagefolder", "--data-dir", folder, "--out", out, "--top-k", "2") == 0
    record = json.loads((out / "labels.json").read_text())
    assert {k: record[k] for k in ("data", "data_dir", "split", "images", "classes", "count")} == {
        "data": "imagefolder", "data_dir": str(folder.resolve()), "split": "train", "images": 3, "classes": 2,
        "count": 3}
    capsys.readouterr()
    assert main(["train", spec_of(ckpt), "--data", "synthetic", "--synthetic-size", "8", "--token-labels", str(out),
                 "--out", str(tmp_path / "r"), "--device", "cpu"]) == 2
    assert capsys.readouterr().err == (
        f"vspec train: error: {out}/labels.json: the maps here are of imagefolder {folder.resolve()} (train: 3 images, "
        "2 classes), not of this run's synthetic (train: 8 images, 2 classes): label this data set (vspec label), or "
        "give its label folder\n")
    assert main(["train", spec_of(ckpt), "--data", "imagefolder", "--data-dir", str(folder), "--token-labels", str(out),
                 "--out", str(tmp_path / "r"), "--device", "cpu", "--batch-size", "3", "--max-steps", "1"]) == 0


def test_the_label_corpus_good_inputs_run(tmp_path):
    """The base every case of tests/helpers/label_corpus.py damages is good: each class's command runs on it."""
    spec, images, maps = _setup(tmp_path)
    assert main(_label(tmp_path / "dense.pt", images, tmp_path / "o")) == 0
    assert train_main(_train(spec, images, tmp_path / "r1", "--token-labels", str(maps))) == 0
    assert train_main(_train(spec, images, tmp_path / "r2", "--workers", "1")) == 0
    assert eval_main([str(tmp_path / "dense.pt"), "--data", "imagefolder", "--data-dir", str(images), "--device",
                      "cpu"]) == 0


def test_an_hf_dataset_is_labelled_by_row_as_the_same_images_in_a_folder(folder, tmp_path, capsys, monkeypatch):
    """--data hf (a Hub id in the cache, two Image columns: --image-column picks): a map per row of the train
    split, named <class>/<row:07d>, each the map of the same image in the folder (the rows in ImageFolder's order);
    labels.json records the id as given and the options (a second run with others is refused); --token-labels trains
    on them from another working folder."""
    datasets = pytest.importorskip("datasets")
    home = offline(monkeypatch, tmp_path)
    dd = from_folder(folder)
    for split, ds in dd.items():  # a second Image column: the images mirrored
        mirrored = []
        for img in ds["image"]:
            buffer = io.BytesIO()
            ImageOps.mirror(img).save(buffer, "PNG")
            mirrored.append({"bytes": buffer.getvalue(), "path": None})
        dd[split] = ds.add_column("mirrored", mirrored).cast_column("mirrored", datasets.Image())
    hub_cache(home, "someone/pets", dd)
    ckpt = checkpoint(tmp_path / "m.pt", 2, **{"head.dense": {}})
    assert label(ckpt, "--data", "imagefolder", "--data-dir", folder, "--out", tmp_path / "by_file", "--top-k",
                 "2") == 0
    hf = ("--data", "hf", "--data-dir", "someone/pets", "--image-column", "image")
    assert label(ckpt, *hf, "--out", tmp_path / "by_row", "--top-k", "2") == 0
    assert capsys.readouterr().out.strip().endswith("3 label maps written, 0 already there (2 logits at 14x14, "
                                                    "2 classes, hf's 3 training images)")
    for row, (name, stem) in enumerate((("0", "cls_a/a_001"), ("0", "cls_a/a_002"), ("1", "cls_b/b"))):
        assert torch.equal(read_label_map(tmp_path / "by_row" / name / f"{row:07d}.pt"),
                           read_label_map(tmp_path / "by_file" / f"{stem}.pt"))
    record = json.loads((tmp_path / "by_row" / "labels.json").read_text())
    assert (record["data"], record["data_dir"], record["options"], record["count"]) == (
        "hf", "someone/pets", {"image_column": "image"}, 3)
    capsys.readouterr()
    assert label(ckpt, *hf, "--label-column", "label", "--out", tmp_path / "by_row", "--top-k", "2") == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"vspec label: error: {tmp_path / 'by_row'} holds the maps of another labeling (options {{'image_column': "
        "'image'} there, {'image_column': 'image', 'label_column': 'label'} now): --overwrite to write them all "
        "anew, or another --out")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["train", spec_of(ckpt), *hf, "--token-labels", str(tmp_path / "by_row"), "--out",
                 str(tmp_path / "r"), "--device", "cpu", "--batch-size", "3", "--max-steps", "1"]) == 0
