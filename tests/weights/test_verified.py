"""Hand-placed weights are verified or marked (issue 44, item 2): a file is checked against the sha256 its entry
or the Hub's cache publishes; where none is known it is used with one warning line and shown as `unverified` by
`vspec weights`, `vspec build`'s weights line, the model folder and `model.pretrained_cfg`. A wrong file is
planted for an entry of each source kind (Hub, Url, Manual)."""

import hashlib
import json
import warnings

import pytest
import torch

import vspec
from tests.helpers.caches import hub_put, pickle_bytes, safetensors_bytes
from vspec.cli import main
from vspec.factory import presets
from vspec.spec import load_weights_table
from vspec.weights import cache, converted

REPO, URL = "tiny/vit", "https://github.com/tiny/vit/releases/download/v1/tiny_vit.pth"
PAGE = "https://drive.google.com/file/d/tiny/view"


def timm_vit(seed: int):
    timm = pytest.importorskip("timm")
    torch.manual_seed(seed)
    return timm.create_model("deit_tiny_patch16_224", img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2,
                             num_classes=3)


@pytest.fixture
def tiny(caches, tmp_path, monkeypatch):
    """A preset of this test's own with four entries: Hub and Url with the published file's sha256, Url and
    Manual without one; returns (the published file's bytes for the Hub / the release, a wrong file's)."""
    import attrs

    deit = vspec.load_spec(presets()["deit_tiny"])
    spec = attrs.evolve(deit, dim=16, depth=1, img_size=(16, 16), num_classes=3,
                        embedder=attrs.evolve(deit.embedder, patch_size=8),
                        block=attrs.evolve(deit.block, attention=attrs.evolve(deit.block.attention, heads=2)))
    params = sum(p.numel() for p in vspec.build(spec).parameters())
    good, wrong = timm_vit(0).state_dict(), timm_vit(1).state_dict()
    files = {"hub": safetensors_bytes(good), "url": pickle_bytes({"model": good})}
    digest = {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}
    folder = tmp_path / "specs"
    folder.mkdir()
    common = (f"converter='timm', params={params}, licence='MIT', classes=3, "
              "preprocess=Preprocess(IMAGENET_MEAN, IMAGENET_STD, crop_pct=0.9)")
    (folder / "tiny_vit.py").write_text(
        "from vspec.spec import IMAGENET_MEAN, IMAGENET_STD, Hub, Manual, Preprocess, PublishedWeights, Url, "
        "from_json\n"
        f"SPEC = from_json({vspec.to_json(spec)!r})\n"
        f"WEIGHTS = {{'hub': PublishedWeights(source=Hub({REPO!r}, 'model.safetensors', sha256={digest['hub']!r}), "
        f"{common}),\n"
        f"  'url': PublishedWeights(source=Url({URL!r}, sha256={digest['url']!r}), unwrap=('model',), {common}),\n"
        f"  'url_none': PublishedWeights(source=Url({URL.replace('tiny_vit', 'other')!r}), unwrap=('model',), "
        f"{common}),\n"
        f"  'manual': PublishedWeights(source=Manual({PAGE!r}, 'tiny.pth'), unwrap=('model',), {common})}}\n")
    monkeypatch.setenv("VSPEC_SPECS", str(folder))
    return files, {"hub": safetensors_bytes(wrong), "url": pickle_bytes({"model": wrong})}


def put(tag: str, data: bytes):
    path = cache.drop_path(load_weights_table(presets()["tiny_vit"])[tag].source)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_a_wrong_file_is_refused_where_a_digest_is_published(tiny):
    files, wrong = tiny
    for tag, kind in (("hub", "hub"), ("url", "url")):
        put(tag, wrong[kind])
        with pytest.raises(cache.WeightsUnavailable, match=r"is corrupt \(its sha256 is not the published"):
            vspec.create_model("tiny_vit", pretrained=tag)
        put(tag, files[kind])  # the published bytes, put by hand: checked, and verified
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model = vspec.create_model("tiny_vit", pretrained=tag)
        assert model.pretrained_cfg["verified"] is True


def test_a_file_no_digest_vouches_for_is_one_warning_and_unverified_everywhere(tiny, capsys):
    _, wrong = tiny
    for tag in ("url_none", "manual"):
        path = put(tag, wrong["url"])
        with pytest.warns(UserWarning) as caught:
            model = vspec.create_model("tiny_vit", pretrained=tag)
        lines = [str(w.message) for w in caught]
        assert lines == [f"tiny_vit ({tag}): {path} is unverified: no published sha256 is known for it (a file put "
                         "by hand, or a source that publishes none); it is used as it is"]
        assert model.pretrained_cfg["verified"] is False
        config = json.loads((converted.converted_folder("tiny_vit", tag) / "config.json").read_text())
        assert config["pretrained_cfg"]["verified"] is False
        assert main(["build", "tiny_vit", "--pretrained", tag]) == 0
        assert " (unverified) (MIT)" in capsys.readouterr().out
    assert main(["weights", "tiny_vit"]) == 0
    rows = {line.split()[1]: line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny_vit")}
    assert rows["url_none"].endswith("converted, unverified") and rows["manual"].endswith("converted, unverified")


def test_deit_tiny_placed_by_hand_is_unverified_not_the_published_file(caches, capsys):
    """The issue's case: a random timm DeiT-Ti saved where the error says to put deit_tiny's file."""
    timm = pytest.importorskip("timm")
    entry = load_weights_table(presets()["deit_tiny"])["fb_in1k"]
    path = cache.drop_path(entry.source)
    path.parent.mkdir(parents=True)
    path.write_bytes(safetensors_bytes(timm.create_model("deit_tiny_patch16_224").state_dict()))
    assert main(["build", "deit_tiny", "--pretrained"]) == 0
    out, err = capsys.readouterr()
    assert "weights: hub:timm/deit_tiny_patch16_224.fb_in1k/model.safetensors (unverified)" in out
    assert err.count("\n") == 1 and err.startswith(f"vspec: warning: deit_tiny (fb_in1k): {path} is unverified")
    assert main(["weights", "deit_tiny"]) == 0
    assert "converted, unverified" in capsys.readouterr().out
    # the same file through Hugging Face's cache (the blob named by its sha256) is verified
    path.unlink()
    converted.converted_folder("deit_tiny", "fb_in1k").rename(path.parent / "old")
    hub_put(caches["hf"], entry.source.repo, entry.source.file,
            safetensors_bytes(timm.create_model("deit_tiny_patch16_224").state_dict()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert vspec.create_model("deit_tiny", pretrained=True).pretrained_cfg["verified"] is True
