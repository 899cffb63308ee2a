"""Published weights in one call (vspec.weights.published): `create_model(name, pretrained=True)`
through the ecosystem's
caches, filled here as the real downloads leave them (tests/helpers/caches.py), in the published files' formats, with
random weights; the reference is the model built from that file by timm, transformers or the released
formulation (benchmarks/released.py; for the Conformer the authors' own outputs, the fixtures). No network:
HF_HUB_OFFLINE=1 throughout."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import torch

import benchmarks.released
import vspec
from tests.helpers.caches import (
    hub_put,
    optimizer_state,
    pickle_bytes,
    release_args,
    released_preset,
    safetensors_bytes,
    torch_put,
)
from tests.helpers.checks import FIXTURES, assert_close_to_stored, perturbed
from tests.helpers.docs_examples import doc
from vspec.convert import ConversionNote, official
from vspec.factory import presets
from vspec.spec import Hub, Manual, Url, load_spec, load_weights_table
from vspec.spec.weights import PublishedWeights
from vspec.weights import cache, converted, published

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = [(name, tag, entry) for name, file in sorted(presets().items())
           for tag, entry in load_weights_table(file).items()]


def assert_same_logits(ref, ours, x) -> None:
    with torch.no_grad():
        diff = (ref(x) - ours(x)).abs().max().item()
    assert diff <= 1e-5, diff


def assert_cache_only(name: str, reference, x, caches) -> None:
    """A second call reads only vspec's cache: with the ecosystem's caches gone, the same logits."""
    import shutil

    for key in ("hf", "torch"):
        shutil.rmtree(caches[key], ignore_errors=True)
    assert_same_logits(reference, vspec.create_model(name, pretrained=True).eval(), x)


# ---------------------------------------------------------------- the table


def test_every_entry_builds_the_parameters_it_declares():
    assert len(ENTRIES) >= 25 and len({name for name, _, _ in ENTRIES}) >= 23
    for name, tag, entry in ENTRIES:
        with torch.device("meta"):
            model = vspec.create_model(name)
        assert published.params(model) == entry.params, (name, tag)


def test_every_source_names_a_real_specific_file():
    seen = set()
    for name, tag, entry in ENTRIES:
        source = entry.source
        assert source.where.startswith("https://"), (name, tag)
        if isinstance(source, Hub):
            owner, repo = source.repo.split("/")
            assert owner and repo and re.fullmatch(r"[\w.-]+\.(safetensors|bin)", source.file), (name, tag)
            key = (source.repo, source.file)
        elif isinstance(source, Url):
            assert re.fullmatch(r"https://github\.com/[\w-]+/[\w-]+/releases/download/[\w.]+/[\w.-]+\.pth(\.tar)?",
                                source.url), source.url
            key = source.url
        else:
            assert isinstance(source, Manual) and source.page.startswith("https://drive.google.com/file/d/")
            key = source.page
        assert key not in seen, f"{name} ({tag}) repeats {key}"
        seen.add(key)
        assert entry.licence and (entry.converter in ("timm", "hf") or entry.converter in official()), (name, tag)
        if entry.converter == "hf":
            assert entry.classes == 0 and entry.tokenizer == source.repo  # published bodies, their own tokenizer
    # the Hub ids the issue names, each one a preset's
    hub = {e.source.repo for _, _, e in ENTRIES if isinstance(e.source, Hub)}
    for repo in ("google-bert/bert-base-uncased", "google-bert/bert-large-uncased", "FacebookAI/roberta-base",
                 "FacebookAI/roberta-large", "SpanBERT/spanbert-base-cased", "google/electra-small-discriminator",
                 "openai-community/gpt2", "openai-community/gpt2-medium", "openai-community/openai-gpt"):
        assert repo in hub, repo


@pytest.mark.parametrize("placeholder", [
    lambda: Hub("timm/<model>", "model.safetensors"), lambda: Hub("a/b/c", "model.safetensors"),
    lambda: Url("http://example.com/w.pth"), lambda: Url("https://github.com/"),
    lambda: Manual("https://drive.google.com/x", "dir/w.pth"),
    lambda: PublishedWeights(source=Url("https://github.com/a/b/releases/download/v1/w.pth"), converter="hf", params=1,
                             licence="MIT"),
])
def test_a_placeholder_or_a_wrong_source_is_refused(placeholder):
    with pytest.raises(vspec.SpecError):
        placeholder()


# ---------------------------------------------------------------- presets equal to the published models


OFFICIAL = [(name, tag, e) for name, tag, e in ENTRIES if e.converter not in ("timm", "hf")]


@pytest.mark.parametrize("name,tag,entry", OFFICIAL, ids=[f"{n}-{t}" for n, t, _ in OFFICIAL])
def test_the_preset_is_the_model_its_released_weights_were_trained_as(name, tag, entry):
    assert official()[entry.converter].spec_of(entry.config) == load_spec(presets()[name])


def test_t2t_presets_keep_the_scale_of_the_released_training_not_of_the_factories_pretrained_path():
    """The released factories set qk_scale = embed_dim^-0.5 only with pretrained=True, a path that loads no file;
    the released weights were trained and evaluated by main.py without it (head_dim^-0.5). The two specs differ."""
    for name, tag, entry in OFFICIAL:
        if entry.converter == "t2t":
            factory_path = {**entry.config, "qk_scale": entry.config["embed_dim"] ** -0.5}
            spec = official()["t2t"].spec_of(factory_path)
            assert spec != load_spec(presets()[name]) and spec.block.attention.scale == factory_path["qk_scale"]


# the published config.json files' fields (Hugging Face's repositories)
HF_CONFIGS = {
    "bert_base": {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768,
                  "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522},
    "bert_large": {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 1024,
                   "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
                   "vocab_size": 30522},
    "roberta_base": {"architectures": ["RobertaForMaskedLM"], "model_type": "roberta", "vocab_size": 50265,
                     "max_position_embeddings": 514, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
                     "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2},
    "roberta_large": {"architectures": ["RobertaForMaskedLM"], "model_type": "roberta", "vocab_size": 50265,
                      "max_position_embeddings": 514, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
                      "pad_token_id": 1, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                      "intermediate_size": 4096},
    "spanbert_base": {"vocab_size": 28996, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                      "intermediate_size": 3072},  # no model_type: the entry adds it
    "electra_small": {"architectures": ["ElectraForPreTraining"], "model_type": "electra", "embedding_size": 128,
                      "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 30522},
    "gpt2": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"},
    "gpt2_medium": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 1024, "n_layer": 24,
                    "n_head": 16},
    "gpt": {"architectures": ["OpenAIGPTLMHeadModel"], "model_type": "openai-gpt", "afn": "gelu"},
}


def hf_config(name: str) -> dict:
    """The full config.json of a text preset's published model: transformers' defaults (those of the published
    base models) with the repository's own fields."""
    import transformers

    fields = dict(HF_CONFIGS[name])
    kind = fields.pop("model_type", "bert")
    config = transformers.AutoConfig.for_model(kind, **fields).to_dict()
    if "model_type" not in HF_CONFIGS[name]:
        config.pop("model_type")
    return config


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_the_text_presets_are_the_published_bodies(name):
    from vspec.convert import spec_from_hf

    entry = next(e for n, _, e in ENTRIES if n == name)
    assert entry.converter == "hf"
    published = spec_from_hf({**entry.config, **hf_config(name)}, classifier=False)
    preset = load_spec(presets()[name])
    assert attrs.evolve(preset, head=published.head, num_classes=published.num_classes) == published


# ---------------------------------------------------------------- one preset per source kind and per family


def test_timm_hub_deit_tiny_logits_cache_and_errors(caches, recwarn):
    timm = pytest.importorskip("timm")
    ref = perturbed(timm.create_model("deit_tiny_patch16_224"))
    blob = hub_put(caches["hf"], "timm/deit_tiny_patch16_224.fb_in1k", "model.safetensors",
                   safetensors_bytes(ref.state_dict()))
    from huggingface_hub import try_to_load_from_cache

    assert try_to_load_from_cache("timm/deit_tiny_patch16_224.fb_in1k", "model.safetensors",
                                  cache_dir=caches["hf"]) == str(blob)  # Hugging Face's own reader finds it
    x = torch.randn(2, 3, 224, 224)
    model = vspec.create_model("deit_tiny", pretrained=True).eval()
    assert_same_logits(ref, model, x)
    folder = converted.converted_folder("deit_tiny", "fb_in1k")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    # another class count keeps the body, a fresh classifier
    ten = vspec.create_model("deit_tiny", pretrained="fb_in1k", num_classes=10).eval()
    assert ten.head.fc.out_features == 10
    assert torch.equal(ten.forward_features(x), model.forward_features(x))
    # tools/eval.py evaluates the published model (its 1000 classes) by name
    evaluated = subprocess.run([sys.executable, "tools/eval.py", "deit_tiny", "--pretrained", "--data", "synthetic",
                                "--synthetic-size", "4", "--batch-size", "4", "--json"], capture_output=True,
                               text=True, cwd=ROOT, timeout=600)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert json.loads(evaluated.stdout)["images"] > 0
    # a corrupt converted folder is refused, not used, and made again from the source
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-5] ^= 0xFF
    (folder / "model.safetensors").write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="refused and made anew"):
        again = vspec.create_model("deit_tiny", pretrained=True).eval()
    assert_same_logits(ref, again, x)
    assert_cache_only("deit_tiny", ref, x, caches)


def test_offline_with_an_empty_cache_is_one_line_naming_the_url_and_the_path(caches):
    for name, tag in (("deit_tiny", "fb_in1k"), ("t2t_vit_7", "ema"), ("conformer_ti", "released")):
        with pytest.raises(cache.WeightsUnavailable) as info:
            vspec.create_model(name, pretrained=True)
        message = str(info.value)
        entry = load_weights_table(presets()[name])[tag]
        assert "\n" not in message and entry.source.where.split("/blob/")[0] in message.replace("/resolve/", "/blob/")
        assert str(cache.drop_path(entry.source)) in message
    assert not caches["vspec"].exists() or not any(caches["vspec"].rglob("*.safetensors"))  # nothing half-written
    with pytest.raises(cache.WeightsUnavailable, match="declares no published weights"):
        vspec.create_model("sot_tiny", pretrained=True)
    with pytest.raises(cache.WeightsUnavailable, match="no weights tagged 'nope'; its tags: fb_in1k"):
        vspec.create_model("deit_tiny", pretrained="nope")


def test_a_corrupt_download_is_refused_and_not_used(caches):
    timm = pytest.importorskip("timm")
    data = safetensors_bytes(timm.create_model("deit_tiny_patch16_224").state_dict())
    blob = hub_put(caches["hf"], "timm/deit_tiny_patch16_224.fb_in1k", "model.safetensors", data)
    blob.resolve().write_bytes(data[:-7] + b"\x00" * 7)  # the bytes no longer those the Hub names the blob by
    with pytest.raises(cache.WeightsUnavailable, match=r"is corrupt \(its sha256 is not the published [0-9a-f]{64}\)"):
        vspec.create_model("deit_tiny", pretrained=True)
    assert not converted.converted_folder("deit_tiny", "fb_in1k").exists()
    # a file put by hand where the error says, truncated: refused by its reader, in one line
    dropped = cache.drop_path(load_weights_table(presets()["deit_tiny"])["fb_in1k"].source)
    dropped.parent.mkdir(parents=True)
    dropped.write_bytes(data[: len(data) // 2])
    with pytest.raises(cache.WeightsUnavailable, match="cannot be read"):
        vspec.create_model("deit_tiny", pretrained=True)
    dropped.write_bytes(data)  # whole: used
    assert vspec.create_model("deit_tiny", pretrained=True) is not None


def test_timm_hub_swin_tiny(caches):
    timm = pytest.importorskip("timm")
    ref = perturbed(timm.create_model("swin_tiny_patch4_window7_224"))
    hub_put(caches["hf"], "timm/swin_tiny_patch4_window7_224.ms_in1k", "model.safetensors",
            safetensors_bytes(ref.state_dict()))
    x = torch.randn(2, 3, 224, 224)
    model = vspec.create_model("swin_tiny", pretrained=True).eval()
    assert_same_logits(ref, model, x)
    # another head on the published body (SoT's on Swin-T: no SoT weights were published)
    sot = vspec.create_model("swin_tiny_sot").eval()
    entry, fresh = published.load_into(sot, "swin_tiny", True)
    assert entry.source.repo == "timm/swin_tiny_patch4_window7_224.ms_in1k"
    assert fresh and all(k.startswith("head.") for k in fresh)
    with torch.no_grad():
        assert torch.equal(sot.forward_features(x), model.forward_features(x))


def test_release_url_t2t_vit_7(caches):
    """A GitHub release asset in torch hub's cache: what timm-0.3's train.py saves in its .pth.tar (the epoch, the
    arch, the command line as an argparse.Namespace, the optimizer's and the AMP scaler's state, the metric), the
    weights under state_dict_ema and state_dict, keyed as a DDP run saved them (`module.`, which T2T's loader
    strips)."""
    entry = load_weights_table(presets()["t2t_vit_7"])["ema"]
    config = {"img_size": 224, "in_chans": 3, "num_classes": 1000, "token_dim": 64, "qkv_bias": False,
              "qk_scale": None, **entry.config}
    ref = perturbed(benchmarks.released.T2TViT(config))
    with torch.no_grad():
        ref.pos_embed.copy_(benchmarks.released.sinusoid_table(197, 256))  # the fixed table, as released
    ddp = {f"module.{k}": v for k, v in ref.state_dict().items()}
    torch_put(caches["torch"], entry.source.file, pickle_bytes({
        "epoch": 309, "arch": "t2t_vit_7", "state_dict": ddp, "optimizer": optimizer_state(ddp), "version": 2,
        "args": release_args(), "amp_scaler": {"scale": 65536.0, "growth_factor": 2.0, "_growth_tracker": 0},
        "metric": 71.7, "state_dict_ema": ddp}))
    x = torch.randn(2, 3, 224, 224)
    assert_same_logits(ref, vspec.create_model("t2t_vit_7", pretrained=True).eval(), x)
    assert_cache_only("t2t_vit_7", ref, x, caches)


def test_release_url_irpe(caches):
    entry = load_weights_table(presets()["deit_tiny_irpe_k"])["released"]
    ref = benchmarks.released.IRPEDeiT({"img_size": 224, "num_classes": 1000, **entry.config}, "k")
    perturbed(ref)
    state = ref.state_dict()  # what the DeiT-style main.py saves: the unwrapped model, optimizer, schedule, args
    torch_put(caches["torch"], entry.source.file, pickle_bytes({
        "model": state, "optimizer": optimizer_state(state), "lr_scheduler": {"t_initial": 300, "base_values": [1e-3]},
        "epoch": 299, "args": release_args(model="deit_tiny_patch16_224_ctx_product_50_shared_k")}))
    assert_same_logits(ref, vspec.create_model("deit_tiny_irpe_k", pretrained=True).eval(), torch.randn(2, 3, 224, 224))


def test_manual_source_conformer_against_the_authors_outputs(caches, tmp_path, monkeypatch):
    """A file behind a Google Drive page: one line saying where to put it; put there, the model is the authors'.
    At the fixture's size (a preset of this test's own), so that the reference is the released code's output."""
    data = torch.load(FIXTURES / "conformer_small.pt", weights_only=True)
    folder = tmp_path / "presets"
    folder.mkdir()
    params = published.params(vspec.build(official()["conformer"].spec_of(data["config"])))
    released_preset(folder, "conformer_fixture", "conformer", data["config"], params=params, classes=10,
                    unwrap=("model",), source="Manual('https://drive.google.com/file/d/fixture/view', "
                                              "'conformer_fixture.pth')")
    monkeypatch.setenv("VSPEC_SPECS", str(folder))
    with pytest.raises(cache.WeightsUnavailable, match="behind a page a program cannot follow; download https://drive"):
        vspec.create_model("conformer_fixture", pretrained=True)
    state = data["state_dict"]  # as the DeiT-style main.py saves it: under "model", with its command line
    torch_put(caches["torch"], "conformer_fixture.pth", pickle_bytes({
        "model": state, "optimizer": optimizer_state(state), "lr_scheduler": {"t_initial": 300}, "epoch": 299,
        "args": release_args(model="Conformer_tiny_patch16")}))
    model = vspec.create_model("conformer_fixture", pretrained=True).eval()
    with torch.no_grad():
        assert_close_to_stored(model(data["x"]), data["y"][0] + data["y"][1])  # eval: the two branches' sum


@pytest.mark.slow  # a fine-tuning run, ~17 s: make test-slow
def test_hub_text_electra_body_logits_equal_transformers_and_fine_tunes(caches, tmp_path):
    transformers = pytest.importorskip("transformers")
    config = hf_config("electra_small")
    ref_pre = perturbed(transformers.ElectraForPreTraining(transformers.ElectraConfig(**config)))
    repo = "google/electra-small-discriminator"
    hub_put(caches["hf"], repo, "pytorch_model.bin", pickle_bytes(ref_pre.state_dict()))
    hub_put(caches["hf"], repo, "config.json", json.dumps(config).encode())
    model = vspec.create_model("electra_small", pretrained=True).eval()
    assert published.params(model) == load_weights_table(presets()["electra_small"])["discriminator"].params
    # the reference: transformers' classifier on the published body, its fresh head set to vspec's fresh head
    ref = transformers.ElectraForSequenceClassification(transformers.ElectraConfig(**config, num_labels=2)).eval()
    ref.electra.load_state_dict(ref_pre.electra.state_dict())
    with torch.no_grad():
        ref.classifier.dense.weight.copy_(model.head.pooler.weight)
        ref.classifier.dense.bias.copy_(model.head.pooler.bias)
        ref.classifier.out_proj.weight.copy_(model.head.fc.weight)
        ref.classifier.out_proj.bias.copy_(model.head.fc.bias)
    ids = torch.randint(1, 30522, (2, 16))
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    with torch.no_grad():
        got, want = model(ids, attention_mask=mask), ref(input_ids=ids, attention_mask=mask).logits
    assert (got - want).abs().max().item() <= 1e-5
    # fine-tuning from it: the weights' own tokenizer (the repository's files, through Hugging Face's cache)
    tokenizer = tmp_path / "tokenizer"
    chars = [chr(c) for c in range(33, 127)]
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    transformers.BertTokenizer(vocab={w: i for i, w in enumerate(words)}).save_pretrained(tokenizer)
    (tokenizer / "vocab.txt").write_text("\n".join(words) + "\n")
    for file in tokenizer.iterdir():
        hub_put(caches["hf"], repo, file.name, file.read_bytes())
    out = tmp_path / "run"
    env = {**os.environ, **{k: str(v) for k, v in (("HF_HUB_CACHE", caches["hf"]), ("TORCH_HOME", caches["torch"]),
                                                    ("VSPEC_CACHE", caches["vspec"]))}}
    trained = subprocess.run([sys.executable, "tools/train.py", "electra_small", "--pretrained", "--out", str(out),
                              "--data", "rt-polarity", "--max-len", "16", "--epochs", "1", "--batch-size", "8",
                              "--max-steps", "2"],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert "note: --pretrained: https://huggingface.co/google/electra-small-discriminator" in trained.stderr
    fresh = re.search(r"fresh: (.*)", trained.stderr)[1].split(", ")
    assert sorted(fresh) == ["head.fc.bias", "head.fc.weight", "head.pooler.bias", "head.pooler.weight"]


def test_bert_files_with_tf_era_layer_norm_names_convert():
    """bert-base-uncased's files name LayerNorm's parameters gamma / beta (transformers renames them on load)."""
    transformers = pytest.importorskip("transformers")
    from vspec.convert import from_hf

    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=37, architectures=["BertForMaskedLM"])
    ref = perturbed(transformers.BertForMaskedLM(config))
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in ref.state_dict().items()}
    assert any(k.endswith("LayerNorm.gamma") for k in state)
    with pytest.warns(ConversionNote, match="BertForMaskedLM: its pretraining head"):
        model = from_hf(state, config=config).eval()
    ids = torch.randint(0, 99, (2, 7))
    with torch.no_grad():
        assert (model.forward_features(ids) - ref.bert(ids).last_hidden_state).abs().max() <= 1e-5


# ---------------------------------------------------------------- Hugging Face's behaviour kept


def small_gpt(kind: str, pad: int | None):
    transformers = pytest.importorskip("transformers")
    if kind == "gpt2":
        config = transformers.GPT2Config(vocab_size=50, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                         num_labels=3, pad_token_id=pad, eos_token_id=pad)
        return perturbed(transformers.GPT2ForSequenceClassification(config))
    config = transformers.OpenAIGPTConfig(vocab_size=50, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                          num_labels=3, pad_token_id=pad)
    return perturbed(transformers.OpenAIGPTForSequenceClassification(config))


@pytest.mark.parametrize("kind", ["gpt2", "openai-gpt"])
def test_a_converted_gpt_classifier_picks_the_token_hugging_face_picks(kind):
    """pad = eos (GPT-2's usual fine-tuning set-up): a real last token equal to the pad id, and a padded batch
    without a mask. `from_hf` sets HF's rule (pad_id); the default rule (the mask's last real token) differs
    there, on purpose, and agrees where the ids say what the mask says."""
    from vspec.convert import from_hf

    pad = 7
    ref = small_gpt(kind, pad)
    model = from_hf(ref).eval()
    assert model.spec.head.pad_id == pad
    ids = torch.randint(8, 50, (3, 10))
    ids[0, 9] = pad  # a real last token whose id is the pad id
    ids[1, 6:] = pad  # right padding
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    default = vspec.build(attrs.evolve(model.spec, head=attrs.evolve(model.spec.head, pad_id=None))).eval()
    default.load_state_dict(model.state_dict())
    with torch.no_grad():
        for given in (mask, None):
            want = ref(input_ids=ids, attention_mask=given).logits
            assert (model(ids, attention_mask=given) - want).abs().max() <= 1e-5
            differs = (default(ids, attention_mask=given) - want).abs().amax(1) > 1e-3
            assert differs.tolist() == ([True, False, False] if given is not None else [True, True, False])


def test_from_hf_refuses_an_unsupported_task_by_its_task(tmp_path):
    transformers = pytest.importorskip("transformers")
    from vspec.convert import ConversionError, from_hf, spec_from_hf

    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=37)
    for cls, task in ((transformers.BertForTokenClassification, "TokenClassification"),
                      (transformers.BertForQuestionAnswering, "QuestionAnswering"),
                      (transformers.BertForMultipleChoice, "MultipleChoice")):
        model = cls(config)
        with pytest.raises(ConversionError, match=f"the task '{task}' is not supported") as info:
            from_hf(model)
        assert "\n" not in str(info.value) and "keys" not in str(info.value)
        model.save_pretrained(tmp_path / task)
        with pytest.raises(ConversionError, match=f"^{cls.__name__}: the task '{task}' is not supported"):
            from_hf(tmp_path / task)
        with pytest.raises(ConversionError, match="is not supported"):
            spec_from_hf(model.config)
    gpt = transformers.GPT2DoubleHeadsModel(transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=32,
                                                                    n_layer=1, n_head=2))
    with pytest.raises(ConversionError, match="the task 'GPT2DoubleHeads' is not supported"):
        from_hf(gpt)
    # the pretraining checkpoints convert to their body
    for cls in (transformers.BertForMaskedLM, transformers.BertForPreTraining):
        ref = perturbed(cls(config))
        ids = torch.randint(0, 99, (2, 5))
        with torch.no_grad(), pytest.warns(ConversionNote, match="pretraining head .* is dropped"):
            assert (from_hf(ref).eval().forward_features(ids) - ref.bert(ids).last_hidden_state).abs().max() <= 1e-5


# ---------------------------------------------------------------- the commands


def run(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vspec.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)


@pytest.mark.slow  # ~22 s: builds, trains and evaluates through the CLI
def test_vspec_weights_build_and_train_with_pretrained(caches, tmp_path):
    timm = pytest.importorskip("timm")
    env = {**os.environ, "HF_HUB_CACHE": str(caches["hf"]), "TORCH_HOME": str(caches["torch"]),
           "VSPEC_CACHE": str(caches["vspec"]), "HF_HUB_OFFLINE": "1"}
    listing = run("weights", env=env)
    assert listing.returncode == 0, listing.stderr
    rows = {tuple(line.split()[:2]) for line in listing.stdout.splitlines()}
    assert ("deit_tiny", "fb_in1k") in rows and ("t2t_vit_14", "ema") in rows and ("bert_base", "hub") in rows
    assert re.search(r"^deit_tiny .* -$", listing.stdout, re.M)
    offline = run("build", "deit_tiny", "--pretrained", env=env)
    assert offline.returncode == 2 and offline.stderr.count("\n") == 1 and "put it at" in offline.stderr
    hub_put(caches["hf"], "timm/deit_tiny_patch16_224.fb_in1k", "model.safetensors",
            safetensors_bytes(timm.create_model("deit_tiny_patch16_224").state_dict()))
    assert re.search(r"^deit_tiny .* downloaded$", run("weights", "deit_tiny", env=env).stdout, re.M)
    built = run("build", "deit_tiny", "--pretrained", "--set", "num_classes=10", env=env)
    assert built.returncode == 0, built.stderr
    assert "weights: hub:timm/deit_tiny_patch16_224.fb_in1k/model.safetensors" in built.stdout
    assert "fresh: head.fc.weight, head.fc.bias" in built.stdout
    assert re.search(r"^deit_tiny .* converted$", run("weights", "deit_tiny", env=env).stdout, re.M)
    assert "| deit_tiny | fb_in1k |" in run("weights", "--markdown", env=env).stdout
    out = tmp_path / "run"
    trained = subprocess.run([sys.executable, "tools/train.py", "deit_tiny", "--pretrained", "--out", str(out),
                              "--set", "img_size=[32,32]", "--data", "synthetic", "--synthetic-size", "8",
                              "--epochs", "1", "--batch-size", "4", "--max-steps", "1"],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert trained.returncode == 0, trained.stderr
    assert "note: --pretrained: https://huggingface.co/timm/deit_tiny_patch16_224.fb_in1k" in trained.stderr


def test_the_weights_page_table_is_the_entries():
    from vspec.cli.weights import markdown_table, rows

    assert markdown_table(rows()) in doc("weights")
