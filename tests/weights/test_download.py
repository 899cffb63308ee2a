"""Published weights under hostile and realistic inputs (issue 43): what the ecosystem's caches hand back is checked
before it is read (no FIFO blocks, no truncated dtype passes, no raw exception escapes), the converted cache is
checked by one function for every reader, an unreachable Hub is said at once, and real release files read.
The caches are filled as the real downloads leave them (tests/helpers/caches.py); no network."""

import json
import os
import socket
import time
import warnings

import attrs
import pytest
import torch

import vspec
from tests.helpers.caches import hub_put, pickle_bytes, safetensors_bytes
from tests.helpers.checks import perturbed
from tests.helpers.cli_corpus import run_case
from vspec.convert import ConversionNote, from_hf, spec_from_hf
from vspec.factory import presets
from vspec.spec import SpecError, load_spec, load_weights_table
from vspec.weights import cache, converted, download, published

REPO = "timm/deit_tiny_patch16_224.fb_in1k"  # deit_tiny's published weights


@pytest.fixture(scope="module")
def deit():
    """timm's DeiT-Ti with weights off their init, and its published file's bytes."""
    timm = pytest.importorskip("timm")
    ref = perturbed(timm.create_model("deit_tiny_patch16_224"))
    return ref, safetensors_bytes(ref.state_dict())


def one_line_error(call) -> str:
    """The message of the one-line WeightsUnavailable / CheckpointError (SpecErrors) that `call()` raises."""
    with pytest.raises(SpecError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and message, message
    return message


def cli(*argv: str, entry: str = "vspec"):
    """`vspec ARGV` (or tools/eval.py's, tools/train.py's command) run in this process on the `caches` fixture's
    caches (tests/helpers/cli_corpus.py's runner: exit code, stdout and stderr captured)."""
    outcome = run_case(list(argv), entry=entry, limit=120)
    assert not outcome.hung and not outcome.traceback, outcome.stderr
    return outcome


# ---------------------------------------------------------------- silent: wrong dtypes, empty tags, stale folders


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8, torch.uint8, torch.bool])
def test_published_weights_of_another_dtype_kind_are_refused_naming_it(caches, deit, dtype):
    ref, _ = deit
    state = {k: (v * 100).to(dtype) for k, v in ref.state_dict().items()}
    hub_put(caches["hf"], REPO, "model.safetensors", safetensors_bytes(state))
    message = one_line_error(lambda: vspec.create_model("deit_tiny", pretrained=True))
    assert f"stored as {str(dtype).removeprefix('torch.')}" in message and "not floating-point" in message
    assert not converted.converted_folder("deit_tiny", "fb_in1k").exists()


def test_published_half_precision_weights_are_floating_and_load(caches, deit):
    ref, _ = deit
    half = {k: v.half() for k, v in ref.state_dict().items()}
    hub_put(caches["hf"], REPO, "model.safetensors", safetensors_bytes(half))
    model = vspec.create_model("deit_tiny", pretrained=True)
    assert torch.equal(model.state_dict()["embedder.proj.weight"], half["patch_embed.proj.weight"].float())


def test_an_empty_tag_is_refused_like_any_unknown_tag(caches, tmp_path):
    for value in ("", 0.5, ["fb_in1k"]):
        assert "expected True (the default weights), a tag" in one_line_error(
            lambda v=value: vspec.create_model("deit_tiny", pretrained=v))
    for argv, entry in ((["build", "deit_tiny", "--pretrained", ""], "vspec"),
                        (["deit_tiny", "--pretrained", "", "--data", "synthetic"], "eval")):
        done = cli(*argv, entry=entry)
        assert done.code == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "--pretrained: an empty tag" in done.stderr
    done = cli("deit_tiny", "--pretrained", "", "--out", str(tmp_path / "run"), "--data", "synthetic", entry="train")
    assert done.code == 2 and "--pretrained: an empty tag" in done.stderr, done.stderr


def plant_other_width(caches) -> None:
    """A model folder of another width under deit_tiny's converted cache entry (a valid folder, not the
    published model)."""
    spec = load_spec(presets()["deit_tiny"])
    other = attrs.evolve(spec, dim=96, block=attrs.evolve(spec.block, attention=attrs.evolve(
        spec.block.attention, heads=3)))
    vspec.save_pretrained(vspec.build(other), converted.converted_folder("deit_tiny", "fb_in1k"))


def test_every_reader_of_the_converted_cache_refuses_a_folder_of_another_model(caches, deit):
    """create_model, vspec build and tools/eval.py check the converted folder with one function: another model's
    folder there is refused (a warning) and made anew from the source; without the source, nothing is evaluated."""
    ref, data = deit
    plant_other_width(caches)
    evaluated = cli("deit_tiny", "--pretrained", "--data", "synthetic", "--synthetic-size", "4", "--batch-size", "4",
                    entry="eval")
    assert evaluated.code == 2 and "top-1" not in evaluated.stdout, evaluated.stdout
    assert "refused and made anew" in evaluated.stderr
    assert "not the published model of the preset (dim: preset 192, published 96)" in evaluated.stderr
    assert "put it at" in evaluated.stderr.splitlines()[-1]
    hub_put(caches["hf"], REPO, "model.safetensors", data)
    for reader in ("create_model", "build", "eval"):
        plant_other_width(caches)
        if reader == "create_model":
            with pytest.warns(UserWarning, match=r"refused and made anew .*dim: preset 192, published 96"):
                model = vspec.create_model("deit_tiny", pretrained=True).eval()
            x = torch.randn(1, 3, 224, 224)
            with torch.no_grad():
                assert (model(x) - ref(x)).abs().max() <= 1e-5
            continue
        argv = ("build", "deit_tiny", "--pretrained") if reader == "build" else (
            "deit_tiny", "--pretrained", "--data", "synthetic", "--synthetic-size", "4", "--batch-size", "4")
        done = cli(*argv, entry="vspec" if reader == "build" else "eval")
        assert done.code == 0, done.stderr
        warned = [line for line in done.stderr.splitlines() if "refused and made anew" in line]
        assert len(warned) == 1 and "dim: preset 192, published 96" in warned[0], done.stderr


# ---------------------------------------------------------------- hub cache: special files, encodings, links


def _hub_fixture(caches, data: bytes):
    link = hub_put(caches["hf"], REPO, "model.safetensors", data)
    return link, link.resolve(), link.parents[2] / "refs" / "main"


@pytest.mark.parametrize("where", ["blob", "snapshot", "ref", "drop path"])
@pytest.mark.parametrize("kind", ["FIFO", "folder"])
def test_a_special_file_in_the_caches_is_refused_in_one_line(caches, deit, where, kind):
    link, blob, ref = _hub_fixture(caches, deit[1])
    target = {"blob": blob, "snapshot": link, "ref": ref,
              "drop path": cache.drop_path(load_weights_table(presets()["deit_tiny"])["fb_in1k"].source)}[where]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    os.mkfifo(target) if kind == "FIFO" else target.mkdir()
    t0 = time.monotonic()
    message = one_line_error(lambda: vspec.create_model("deit_tiny", pretrained=True))
    assert time.monotonic() - t0 < 60  # a FIFO opened would block for ever
    assert ("a named pipe (FIFO)" if kind == "FIFO" else "a folder") in message and str(target) in message


def test_a_damaged_ref_is_one_line_for_build_and_weights(caches, deit):
    _, _, ref = _hub_fixture(caches, deit[1])
    for raw in (b"\xff\xfe\x00abc", b"", b"x" * 5000, b"main\n"):
        ref.write_bytes(raw)
        for argv in (("weights", "deit_tiny"), ("build", "deit_tiny", "--pretrained")):
            done = cli(*argv)
            assert done.code == 2 and done.stderr.count("\n") == 1, done.stderr
            assert "Hugging Face's cache is damaged" in done.stderr and "refs/main holds no commit hash" in done.stderr


def test_a_hub_config_that_is_not_utf8_json_or_a_table_is_one_line(caches, tmp_path, monkeypatch):
    """A Hugging Face text preset's config.json in the cache: non-UTF-8, a JSON list, truncated."""
    tiny_text_preset(tmp_path, monkeypatch)
    state = dict(transformers_bert(SPANBERT_FIELDS).state_dict())
    hub_put(caches["hf"], "tiny/spanbert", "pytorch_model.bin", pickle_bytes(state))
    for raw, why in ((b'{"hidden_size": 32, "x": "caf\xe9"}', "UnicodeDecodeError"), (b"[1, 2]", "a list"),
                     (b'{"hidden_size": ', "JSONDecodeError")):
        hub_put(caches["hf"], "tiny/spanbert", "config.json", raw)
        message = one_line_error(lambda: vspec.create_model("tiny_spanbert", pretrained=True))
        assert "config.json" in message and why in message, message


def test_other_raw_errors_are_weights_unavailable_naming_the_path(caches, deit, tmp_path, monkeypatch):
    data = deit[1]
    # a URL source's file linked to /proc/self/mem (reads fail with EIO)
    entry = load_weights_table(presets()["t2t_vit_7"])["ema"]
    path = cache.drop_path(entry.source)
    path.parent.mkdir(parents=True)
    path.symlink_to("/proc/self/mem")
    message = one_line_error(lambda: vspec.create_model("t2t_vit_7", pretrained=True))
    assert str(path) in message and "cannot be read" in message
    # vspec's cache where nothing can be written
    hub_put(caches["hf"], REPO, "model.safetensors", data)
    for unwritable in ("/proc/vspec-cache", "/sys/vspec-cache"):
        monkeypatch.setenv("VSPEC_CACHE", unwritable)
        message = one_line_error(lambda: vspec.create_model("deit_tiny", pretrained=True))
        assert f"vspec's cache {unwritable}/pretrained cannot be written" in message
    monkeypatch.setenv("VSPEC_CACHE", str(caches["vspec"]))
    # the converted entry is a file, a FIFO, a link to a refused folder
    folder = converted.converted_folder("deit_tiny", "fb_in1k")
    folder.parent.mkdir(parents=True)
    for kind in ("a file", "a named pipe (FIFO)", "a symbolic link"):
        if kind == "a file":
            folder.write_text("x")
        elif kind == "a named pipe (FIFO)":
            os.mkfifo(folder)
        else:
            bad = vspec.save_pretrained(vspec.build(load_spec(presets()["deit_tiny"])), tmp_path / "elsewhere")
            (bad / "config.json").write_text("{}")
            folder.symlink_to(bad)
        message = one_line_error(lambda: vspec.create_model("deit_tiny", pretrained=True))
        assert str(folder) in message and kind in message, message
        folder.unlink()
    assert (tmp_path / "elsewhere" / "model.safetensors").exists()  # nothing removed through the link


def test_a_repaired_cache_warns_in_one_line_on_the_command_line(caches, deit):
    hub_put(caches["hf"], REPO, "model.safetensors", deit[1])
    vspec.create_model("deit_tiny", pretrained=True)
    (converted.converted_folder("deit_tiny", "fb_in1k") / "config.json").write_text("{}")
    done = cli("build", "deit_tiny", "--pretrained")
    assert done.code == 0, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("vspec: warning: deit_tiny (fb_in1k): the "
                                                                   "converted weights in vspec's cache are refused")


# ---------------------------------------------------------------- an unreachable network


def test_an_unreachable_hub_is_said_at_once_without_hf_hub_offline(caches, monkeypatch):
    """Without HF_HUB_OFFLINE and with the Hub's address refusing connections (huggingface_hub would retry it for
    half a minute), the missing file is one line within seconds, reading only the cache."""
    import huggingface_hub.constants

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(download, "_REACHABLE", {})
    t0 = time.monotonic()
    message = one_line_error(lambda: vspec.create_model("deit_tiny", pretrained=True))
    assert time.monotonic() - t0 < 5
    assert "not in Hugging Face's cache and 127.0.0.1 cannot be reached (no network?)" in message


def test_the_probe_gives_up_after_its_timeout(monkeypatch):
    """A name lookup or connection that hangs (a black-holed network) counts as unreachable after the timeout."""
    def hang(*args, **kwargs):  # then fails as a socket's timeout does (the probe's thread outlives the test)
        time.sleep(30)
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", hang)
    monkeypatch.setattr(download, "_REACHABLE", {})
    t0 = time.monotonic()
    assert download.reachable("https://example.invalid/x", timeout=0.5) is False
    assert time.monotonic() - t0 < 5


# ---------------------------------------------------------------- language models: heads, configs


def test_from_hf_of_an_lm_or_mlm_model_warns_that_its_head_is_dropped():
    transformers = pytest.importorskip("transformers")
    bert = perturbed(transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37)))
    gpt = perturbed(transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=50, n_positions=16, n_embd=32, n_layer=1, n_head=2)))
    for model, body, head in ((bert, bert.bert, "cls"), (gpt, gpt.transformer, "lm_head")):
        with pytest.warns(ConversionNote, match=rf"^{type(model).__name__}: its pretraining head \({head}: the LM / "
                                                r"MLM head\) is dropped; the body is converted$") as record:
            ours = from_hf(model).eval()
        assert len(record) == 1
        ids = torch.randint(0, 50, (2, 5))
        with torch.no_grad():
            assert (ours.forward_features(ids) - body(ids).last_hidden_state).abs().max() <= 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a base model converts without a word
        from_hf(perturbed(transformers.BertModel(bert.config)))


# SpanBERT/spanbert-base-cased's config.json, as published in 2019: no model_type, layer_norm_eps or pad_token_id
SPANBERT_CONFIG = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
                   "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
                   "max_position_embeddings": 512, "num_attention_heads": 12, "num_hidden_layers": 12,
                   "type_vocab_size": 2, "vocab_size": 28996}
SPANBERT_FIELDS = {**SPANBERT_CONFIG, "hidden_size": 32, "intermediate_size": 37, "num_attention_heads": 2,
                   "num_hidden_layers": 2, "vocab_size": 99, "max_position_embeddings": 64}


def transformers_bert(fields: dict):
    transformers = pytest.importorskip("transformers")
    return perturbed(transformers.BertModel(transformers.BertConfig(**fields)))


def test_a_published_config_without_hugging_faces_defaults_converts():
    pytest.importorskip("transformers")
    entry = load_weights_table(presets()["spanbert_base"])["hub"]
    spec = spec_from_hf({**entry.config, **SPANBERT_CONFIG}, classifier=False)
    preset = load_spec(presets()["spanbert_base"])
    assert attrs.evolve(preset, head=spec.head, num_classes=0) == spec
    assert spec.block.norm.eps == 1e-12 and spec.embedder.padding_id == 0  # BertConfig's defaults


def tiny_text_preset(tmp_path, monkeypatch) -> None:
    """A preset `tiny_spanbert` of SpanBERT's layout at a tiny size, its weights on the Hub with a config.json in
    the 2019 format."""
    folder = tmp_path / "presets"
    folder.mkdir(exist_ok=True)
    spec = spec_from_hf({"model_type": "bert", **SPANBERT_FIELDS}, classifier=False)
    params = published.params(vspec.build(spec))
    (folder / "tiny_spanbert.py").write_text(
        "from vspec.spec import Hub, PublishedWeights, from_json\n"
        f"SPEC = from_json({vspec.to_json(spec)!r})\n"
        "WEIGHTS = {'hub': PublishedWeights(source=Hub('tiny/spanbert', 'pytorch_model.bin', config='config.json'), "
        f"converter='hf', params={params}, licence='Apache-2.0', classes=0, config={{'model_type': 'bert'}}, "
        "tokenizer='tiny/spanbert')}\n")
    monkeypatch.setenv("VSPEC_SPECS", str(folder))


def test_a_2019_config_json_in_the_cache_converts_with_the_defaults(caches, tmp_path, monkeypatch):
    tiny_text_preset(tmp_path, monkeypatch)
    ref = transformers_bert(SPANBERT_FIELDS)
    hub_put(caches["hf"], "tiny/spanbert", "pytorch_model.bin",
            pickle_bytes({f"bert.{k}": v for k, v in ref.state_dict().items()}))
    hub_put(caches["hf"], "tiny/spanbert", "config.json", json.dumps(SPANBERT_FIELDS).encode())
    model = vspec.create_model("tiny_spanbert", pretrained=True).eval()
    ids = torch.randint(0, 99, (2, 7))
    with torch.no_grad():
        assert (model.forward_features(ids) - ref(ids).last_hidden_state).abs().max() <= 1e-5


# ---------------------------------------------------------------- model folders of float8 weights


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_weights_load_through_every_reader(tmp_path, capsys, dtype):
    from vspec.cli.eval import main as eval_main
    from vspec.spec import MHSA, Block, Model, PatchEmbed

    spec = Model(embedder=PatchEmbed(patch_size=4), dim=16, depth=1, block=Block(attention=MHSA(heads=2)),
                 img_size=8, in_chans=1, num_classes=10)
    model = vspec.build(spec).to(dtype)
    folder = vspec.save_pretrained(model, tmp_path / "f8")
    vspec.weights.checkpoint.save(model, tmp_path / "f8.pt")
    want = model.state_dict()["embedder.proj.weight"].float()
    for loaded in (vspec.from_pretrained(folder), vspec.create_model(folder), vspec.load(tmp_path / "f8.pt")):
        assert torch.equal(loaded.state_dict()["embedder.proj.weight"], want)
    assert eval_main([str(folder), "--data", "digits", "--batch-size", "64"]) == 0, capsys.readouterr().err
    bad = model.state_dict()
    bad["embedder.proj.weight"].view(-1)[3] = float("nan")  # float8_e4m3fn has NaN but no inf
    message = one_line_error(lambda: vspec.from_pretrained(vspec.save_pretrained(model, tmp_path / "nan")))
    assert "embedder.proj.weight holds NaN or infinite values" in message
