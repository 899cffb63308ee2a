"""Model folders (vspec/weights/folder.py): config.json + model.safetensors. A round
trip gives equal logits for a shrunk
preset of every family, loaded in a new process; tied weights are written once and tied again; every crafted
folder (bad JSON, wrong shapes, edited bytes, truncated, missing, a huge declared header, ...) is one line
naming the file; `vspec build --save-format folder` and tools/train.py --save-format folder write folders that
vspec.from_pretrained and tools/eval.py read."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import vspec
import vspec.cli
from tests.helpers.shrunk import small
from vspec.cli.eval import main as eval_main
from vspec.cli.train import main as train_main
from vspec.weights import folder as model_folder
from vspec.weights.checkpoint import CheckpointError

ROOT = Path(__file__).resolve().parents[2]
# one preset per family: ViT / DeiT, Swin, SoT's head and its embedder, DHVT, MSF (isotropic and Swin), Refiner,
# T2T-ViT, iRPE, Conformer, SimpleViT, the text bodies (BERT, GPT)
FAMILIES = ["deit_tiny", "swin_tiny", "deit_tiny_sot", "sot_tiny", "dhvt_tiny_cifar_p4", "msf_vit_ti",
            "refined_vit_s", "t2t_vit_7", "deit_tiny_irpe_k", "conformer_ti", "simplevit_ti",
            "bert_base", "gpt"]

# a new process: reads the folders named on its command line and saves their logits on the saved inputs
LOADER = """
import sys, torch, vspec
torch.set_num_threads(int(sys.argv[1]))
for folder in sys.argv[2:]:
    model = vspec.from_pretrained(folder)  # in eval mode
    with torch.no_grad():
        torch.save(model(torch.load(folder + "/x.pt")), folder + "/logits.pt")
"""


def env():
    return dict(os.environ, PYTHONPATH=str(ROOT))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{family: (folder, logits)}: each shrunk preset built (seed 0), saved, and its logits on two inputs."""
    root = tmp_path_factory.mktemp("folders")
    out = {}
    for name in FAMILIES:
        spec = small(vspec.load_spec(ROOT / "specs" / f"{name}.py"))
        torch.manual_seed(0)
        model = vspec.build(spec).eval()
        for p in model.parameters():  # no weight at its initial constant (zero biases, unit norms)
            p.data.add_(torch.randn_like(p) * 0.01)
        x = vspec.example_input(spec, 2)
        with torch.no_grad():
            logits = model(x)
        folder = vspec.save_pretrained(model, root / name)
        torch.save(x, folder / "x.pt")
        out[name] = (folder, logits)
    return out


def test_the_folder_holds_config_json_and_safetensors(saved):
    folder, _ = saved["deit_tiny"]
    config = json.loads((folder / "config.json").read_text())
    assert config["format"] == "vspec-folder-1" and config["architecture"] == "vspec"
    assert vspec.from_dict(config["spec"]) == small(vspec.load_spec(ROOT / "specs/deit_tiny.py"))
    assert config["spec"]["version"] == json.loads(vspec.to_json(vspec.from_dict(config["spec"])))["version"]
    assert (config["num_classes"], config["num_features"]) == (3, 12)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
        assert f.metadata() == {"format": "pt"}
    assert keys == set(vspec.build(vspec.from_dict(config["spec"]), "meta").state_dict())


def test_the_hub_tools_read_the_folder(saved):
    """The file names are huggingface_hub's, and its own reader (offline) gives the model's weights; a model
    loaded with huggingface_hub.load_torch_model into the rebuilt module gives the same logits."""
    from huggingface_hub import constants, load_state_dict_from_file, load_torch_model

    assert (model_folder.CONFIG, model_folder.WEIGHTS) == (constants.CONFIG_NAME, constants.SAFETENSORS_SINGLE_FILE)
    folder, logits = saved["swin_tiny"]
    ours = vspec.from_pretrained(folder).eval()
    theirs = load_state_dict_from_file(folder / model_folder.WEIGHTS)
    assert theirs.keys() == ours.state_dict().keys()
    model = vspec.build(ours.spec).eval()
    load_torch_model(model, folder)
    with torch.no_grad():
        assert torch.equal(model(torch.load(folder / "x.pt")), logits)


@pytest.mark.parametrize("name", FAMILIES)
def test_round_trip_in_process_gives_equal_logits(saved, name):
    """from_pretrained gives the model in eval mode, as Hugging Face's does: the logits equal with no .eval()
    (dropout off); vspec.load too; create_model of the folder in train mode, as timm's."""
    folder, logits = saved[name]
    model = vspec.from_pretrained(folder)
    assert not any(m.training for m in model.modules())
    with torch.no_grad():
        assert torch.equal(model(torch.load(folder / "x.pt")), logits)
    assert not vspec.load(folder).training and vspec.create_model(folder).training


def test_round_trip_in_a_new_process_gives_equal_logits(saved):
    """Every family's folder loaded by one new process, with this process's thread count (the same kernels)."""
    folders = [str(saved[name][0]) for name in FAMILIES]
    done = subprocess.run([sys.executable, "-c", LOADER, str(torch.get_num_threads()), *folders], env=env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in FAMILIES:
        folder, logits = saved[name]
        assert torch.equal(torch.load(folder / "logits.pt"), logits), name


def test_tied_weights_are_written_once_and_tied_again(tmp_path):
    spec = vspec.override(small(vspec.load_spec(ROOT / "specs/deit_tiny.py")), {"depth": 2})
    torch.manual_seed(0)
    model = vspec.build(spec).eval()
    blocks = model.stages[0].blocks
    blocks[1].norm1.weight = blocks[0].norm1.weight  # one parameter under two names
    with torch.no_grad():
        blocks[0].norm1.weight.mul_(1.5)
    names = [k for k, v in model.state_dict().items() if k.endswith("norm1.weight")]
    assert len(names) == 2
    folder = vspec.save_pretrained(model, tmp_path / "tied")
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        assert names[1] not in f.keys() and json.loads(f.metadata()["vspec.aliases"]) == {names[1]: names[0]}
    loaded = vspec.from_pretrained(folder).eval()
    x = vspec.example_input(spec, 2)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    assert torch.equal(loaded.state_dict()[names[1]], blocks[0].norm1.weight)


def test_a_channels_last_model_is_written_contiguous(saved, tmp_path):
    """Training runs channels-last: its 4-d weights are not contiguous, and safetensors writes plain rows."""
    folder, logits = saved["dhvt_tiny_cifar_p4"]
    model = vspec.from_pretrained(folder).eval().to(memory_format=torch.channels_last)
    assert any(not t.is_contiguous() for t in model.state_dict().values())
    loaded = vspec.from_pretrained(vspec.save_pretrained(model, tmp_path / "cl")).eval()
    with torch.no_grad():
        assert torch.equal(loaded(torch.load(folder / "x.pt")), logits)


# ---------------------------------------------------------------- crafted folders
def _copy(saved, tmp: Path, name: str) -> Path:
    folder = tmp / name
    shutil.copytree(saved["deit_tiny"][0], folder)
    return folder


def _config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def _write_config(folder: Path, config: dict, resum: bool = False) -> None:
    if resum:  # recompute the checksum, as whoever edits on purpose can
        with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        config["sha256"] = model_folder._digest(config["spec"], tensors, {})
    (folder / "config.json").write_text(json.dumps(config))


def _weights(folder: Path, change) -> None:
    """model.safetensors rewritten with `change(tensors)`, the checksum recomputed."""
    path = folder / "model.safetensors"
    with safe_open(str(path), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    change(tensors)
    save_file(tensors, str(path))
    _write_config(folder, _config(folder), resum=True)


def _bytes(path: Path, change) -> None:
    path.write_bytes(change(path.read_bytes()))


def _flip_data(data: bytes) -> bytes:
    n = int.from_bytes(data[:8], "little")
    at = 8 + n + (len(data) - 8 - n) // 2
    return data[:at] + bytes(b ^ 0xFF for b in data[at:at + 16]) + data[at + 16:]


def _header(data: bytes, change) -> bytes:
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    change(header)
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + data[8 + n:]


def _spec(**changes):
    def edit(folder):
        config = _config(folder)
        for key, value in changes.items():
            node = config["spec"]
            *path, last = key.split(".")
            for part in path:
                node = node[part]
            node[last] = value
        _write_config(folder, config, resum=True)
    return edit


CONFIG, WEIGHTS, FOLDER = "config.json", "model.safetensors", ""
CRAFTED = {  # name: (how the folder is made from a good one, the file the error names, a part of the message)
    "no folder": (lambda f: shutil.rmtree(f), FOLDER, "no such model folder"),
    "a file, not a folder": (lambda f: (shutil.rmtree(f), f.write_text("x")), FOLDER, "not a folder"),
    "no config.json": (lambda f: (f / CONFIG).unlink(), CONFIG, "no such file"),
    "no model.safetensors": (lambda f: (f / WEIGHTS).unlink(), WEIGHTS, "no such file"),
    "bad JSON": (lambda f: _bytes(f / CONFIG, lambda d: d[:-20]), CONFIG, "not JSON (JSONDecodeError"),
    "JSON not a table": (lambda f: (f / CONFIG).write_text("[1, 2]"), CONFIG, "not a JSON table"),
    "JSON nested 100,000 deep": (lambda f: (f / CONFIG).write_text("[" * 100_000), CONFIG, "nested too deep"),
    "a transformers config": (lambda f: (f / CONFIG).write_text('{"model_type": "bert"}'), CONFIG,
                              "not a vspec model folder's config (format none"),
    "wrong format tag": (lambda f: _write_config(f, {**_config(f), "format": "vspec-folder-9"}), CONFIG,
                         "format 'vspec-folder-9'"),
    "spec not a table": (lambda f: _write_config(f, {**_config(f), "spec": "deit"}), CONFIG,
                         "the checkpoint's 'spec' is a str, not a dict"),
    "transformers' config, spec not a table": (lambda f: _write_config(f, {"model_type": "vspec", "spec": [1]}),
                                               CONFIG, "the checkpoint's 'spec' is a list, not a dict"),
    "transformers' config, id2label a list": (
        lambda f: _write_config(f, {"model_type": "vspec", "spec": _config(f)["spec"], "id2label": ["a"]}), CONFIG,
        "the checkpoint's 'id2label' is a list, not a dict"),
    "invalid spec": (_spec(**{"block.attention.heads": 5}), CONFIG, "heads"),
    "spec from the future": (_spec(version=99), CONFIG, "99"),
    "spec of a huge model, tiny weights": (_spec(depth=10**6), WEIGHTS, "1,000,000 blocks"),
    "edited spec (gelu -> relu)": (lambda f: _write_config(f, {**_config(f), "spec": {
        **_config(f)["spec"], "block": {**_config(f)["spec"]["block"], "ffn": {
            **_config(f)["spec"]["block"]["ffn"], "act": "relu"}}}}), FOLDER, "checksum mismatch"),
    "edited bytes in the weights": (lambda f: _bytes(f / WEIGHTS, _flip_data), FOLDER, "checksum mismatch"),
    "wrong shapes": (_spec(dim=24), WEIGHTS, "do not fit its spec: shape"),
    "missing key": (lambda f: _weights(f, lambda t: t.pop("head.fc.weight")), WEIGHTS, "missing head.fc.weight"),
    "unexpected key": (lambda f: _weights(f, lambda t: t.update(extra=torch.zeros(2))), WEIGHTS,
                       "unexpected extra"),
    "complex weights": (lambda f: _weights(f, lambda t: t.update({"head.fc.bias": torch.zeros(3).to(torch.complex64)})),
                        WEIGHTS, "dtype head.fc.bias complex64"),
    "empty safetensors": (lambda f: (f / WEIGHTS).write_bytes(b""), WEIGHTS, "not even the 8-byte length"),
    "truncated safetensors": (lambda f: _bytes(f / WEIGHTS, lambda d: d[:-100]), WEIGHTS, "outside the file's"),
    "truncated in the header": (lambda f: _bytes(f / WEIGHTS, lambda d: d[:200]), WEIGHTS, "truncated"),
    "huge declared header": (lambda f: _bytes(f / WEIGHTS, lambda d: (2**62).to_bytes(8, "little") + d[8:]),
                             WEIGHTS, "its header declares 4,611,686,018,427,387,904 bytes"),
    "header not JSON": (lambda f: _bytes(f / WEIGHTS, lambda d: d[:8] + b"\xff" * 16 + d[24:]), WEIGHTS,
                        "its header is not JSON"),
    "header dtype unknown": (lambda f: _bytes(f / WEIGHTS, lambda d: _header(d, lambda h: h["head.fc.bias"].update(
        dtype="F128"))), WEIGHTS, "dtype 'F128'"),
    "header shape against its bytes": (lambda f: _bytes(f / WEIGHTS, lambda d: _header(d, lambda h: h[
        "head.fc.bias"].update(shape=[10**9]))), WEIGHTS, "bytes for shape [1000000000]"),
    "header overlapping tensors": (lambda f: _bytes(f / WEIGHTS, lambda d: _header(d, lambda h: h[
        "head.fc.bias"].update(data_offsets=h["pos_embed"]["data_offsets"][:1] + [
            h["pos_embed"]["data_offsets"][0] + 12]))), WEIGHTS, "overlap"),
    "bad aliases": (lambda f: _bytes(f / WEIGHTS, lambda d: _header(d, lambda h: h.update(
        __metadata__={"vspec.aliases": '{"x": "nowhere"}'}))), WEIGHTS, "vspec.aliases"),
}


@pytest.mark.parametrize("name", CRAFTED)
def test_every_crafted_folder_is_one_line_naming_the_file(saved, tmp_path, name):
    make, file, needle = CRAFTED[name]
    folder = _copy(saved, tmp_path, "model")
    make(folder)
    with pytest.raises(CheckpointError) as e:
        vspec.from_pretrained(folder)
    message = str(e.value)
    assert "\n" not in message and len(message) < 400, message
    assert message.startswith(f"{folder / file if file else folder}: ") and needle in message, message


# ---------------------------------------------------------------- command lines
def test_vspec_build_writes_a_model_folder(tmp_path, capsys):
    spec = small(vspec.load_spec(ROOT / "specs/swin_tiny.py"))
    (tmp_path / "s.json").write_text(vspec.to_json(spec))
    out = tmp_path / "new" / "swin"
    assert vspec.cli.main(["build", str(tmp_path / "s.json"), "--save-format", "folder", "--out", str(out)]) == 0
    assert vspec.from_pretrained(out).spec == spec
    capsys.readouterr()
    (tmp_path / "a_file").write_text("x")
    assert vspec.cli.main(["build", str(tmp_path / "s.json"), "--save-format", "folder", "--out",
                           str(tmp_path / "a_file")]) == 2
    assert capsys.readouterr().err == f"vspec: error: --out {tmp_path / 'a_file'}: is a regular file, not a folder\n"


def test_train_writes_best_and_final_model_folders(tmp_path, capsys):
    """A one-block ViT on digits, two steps: OUT/best and OUT/final hold best.pt's and last.pt's weights, and
    tools/eval.py gives the same figures on the folder as on best.pt."""
    out = tmp_path / "run"
    spec = ["depth=1", "dim=16", "block.attention.heads=2", "img_size=8", "embedder.patch_size=4", "num_classes=10"]
    assert train_main([str(ROOT / "specs/deit_tiny.py"), *[a for s in spec for a in ("--set", s)], "--data",
                       "digits", "--out", str(out), "--epochs", "1", "--max-steps", "2", "--batch-size", "128",
                       "--device", "cpu", "--save-format", "folder"]) == 0
    assert f"model folders {out / 'best'} and {out / 'final'}" in capsys.readouterr().out
    for folder, pt in (("best", "best.pt"), ("final", "last.pt")):
        model, ref = vspec.from_pretrained(out / folder), vspec.load(out / pt)
        assert model.spec == ref.spec
        for key, value in ref.state_dict().items():
            assert torch.equal(model.state_dict()[key], value), key
    results = []
    for path in (out / "best", out / "best.pt"):
        # one crop ratio for both: a folder has no training recipe to take eval.py's default from
        assert eval_main([str(path), "--data", "digits", "--json", "--crop-ratio", "1"]) == 0
        results.append(json.loads(capsys.readouterr().out))
    assert results[0]["top1"] == results[1]["top1"] and results[0]["loss"] == results[1]["loss"]
    shutil.rmtree(out / "best")  # a resumed finished run leaves it; a resume mid-run rewrites it from best.pt
    from vspec.train.run_folder import refresh_best_folder

    refresh_best_folder(out)
    assert torch.equal(vspec.from_pretrained(out / "best").state_dict()["head.fc.weight"],
                       vspec.load(out / "best.pt").state_dict()["head.fc.weight"])


def _as_transformers_wrote_it(folder: Path, prefix: str = "model.", architectures=("VspecForSequenceClassification",),
                              classes: int | None = None) -> None:
    """The folder rewritten as transformers writes a vspec.register_hf() model's (written here by hand: no
    transformers): config.json with model_type "vspec", the spec and id2label, no format or checksum; the weights
    under `prefix`."""
    config = _config(folder)
    classes = config["num_classes"] if classes is None else classes
    (folder / CONFIG).write_text(json.dumps({"model_type": "vspec", "architectures": list(architectures),
                                             "spec": config["spec"], "id2label": {str(i): f"L{i}" for i in
                                                                                  range(classes)}}))
    with safe_open(str(folder / WEIGHTS), framework="pt") as f:
        tensors = {prefix + k: f.get_tensor(k) for k in f.keys()}
    save_file(tensors, str(folder / WEIGHTS), metadata={"format": "pt"})


def test_a_folder_transformers_wrote_loads_and_a_stray_key_is_one_line(saved, tmp_path):
    folder, logits = saved["bert_base"]
    config = _config(folder)
    assert (config["model_type"], config["architectures"]) == ("vspec", ["VspecForSequenceClassification"])
    assert _config(saved["deit_tiny"][0])["architectures"] == ["VspecForImageClassification"]
    made = {}
    for name, kw in {"hf": {}, "five": {"classes": 5}, "stray": {"prefix": ""}}.items():
        made[name] = shutil.copytree(folder, tmp_path / name)
        _as_transformers_wrote_it(made[name], **kw)
    with torch.no_grad():
        assert torch.equal(vspec.from_pretrained(made["hf"])(torch.load(folder / "x.pt")), logits)
    with pytest.raises(CheckpointError, match=r"model.safetensors: the weights do not fit its spec: shape head.fc"):
        vspec.from_pretrained(made["five"])  # id2label says the classes: 5, the classifier's shapes 3
    with pytest.raises(CheckpointError) as e:
        vspec.from_pretrained(made["stray"])
    assert str(e.value).startswith(f"{made['stray'] / WEIGHTS}: tensor ") and "is not under 'model.'" in str(e.value)
