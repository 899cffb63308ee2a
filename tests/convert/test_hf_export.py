"""vspec -> Hugging Face (`vspec.convert.to_hf`): every text preset HF has, shrunk, written as a folder that
transformers' own Auto classes read (no missing or unexpected keys, equal logits and hidden states on padded
batches, in a process that never imports vspec too), and read back by `from_hf` bit for bit; the full-size presets
checked on the meta device; what HF cannot express refused in one line naming the part, with nothing written."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vspec
from tests.helpers.checks import perturbed
from tests.helpers.text import assert_same_hidden_states
from vspec.convert import ConversionError, ConversionNote, from_hf, to_hf
from vspec.convert.hf_export import hf_weights
from vspec.spec import MeanShiftAttention, load_weights_table, override

transformers = pytest.importorskip("transformers")  # the `text` extra, which `make test` installs
ROOT = Path(__file__).resolve().parents[2]
# preset -> (HF's model type, its classifier): what each preset is (docs/families/text.md)
PRESETS = {"bert_base": ("bert", "BertForSequenceClassification"),
           "bert_large": ("bert", "BertForSequenceClassification"),
           "spanbert_base": ("bert", "BertForSequenceClassification"),
           "roberta_base": ("roberta", "RobertaForSequenceClassification"),
           "roberta_large": ("roberta", "RobertaForSequenceClassification"),
           "electra_small": ("electra", "ElectraForSequenceClassification"),
           "gpt": ("openai-gpt", "OpenAIGPTForSequenceClassification"),
           "gpt2": ("gpt2", "GPT2ForSequenceClassification"),
           "gpt2_medium": ("gpt2", "GPT2ForSequenceClassification")}
SHRINK = {"depth": 2, "dim": 32, "block.attention.heads": 4, "block.ffn.hidden": 128, "embedder.vocab_size": 100}


def preset(name: str) -> vspec.Model:
    return vspec.load_spec(ROOT / "specs" / f"{name}.py")


def shrunk(name: str, **changes) -> vspec.Model:
    """The preset at width 32, depth 2, 100 words (ELECTRA's embeddings 16 wide); a GPT's head with Hugging Face's
    rule for padding id 0 (the last token that is not 0), so that padded batches compare."""
    spec = override(preset(name), SHRINK)
    extra = ({"head.pad_id": 0} if spec.head.kind == "last_token" else
             {"embedder.width": 16} if name.startswith("electra_small") else {})
    return override(spec, {**extra, **changes})


def padded(spec: vspec.Model, lengths=(9, 5, 2), seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (no real token is the padding id) and their attention mask."""
    pad = spec.embedder.padding_id if spec.embedder.padding_id is not None else spec.head.pad_id
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(3, spec.embedder.vocab_size, mask.shape, generator=g)
    return torch.where(mask.bool(), ids, torch.full_like(ids, pad)), mask


def loaded(auto, folder: Path):
    """HF's own model of the folder, and its loading info: nothing missing, unexpected or mismatched."""
    model, info = auto.from_pretrained(folder, output_loading_info=True)
    assert not any(info.values()), info
    return model.eval()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_text_preset_round_trips_through_hugging_face(name, tmp_path):
    """Written, read by transformers' AutoModelForSequenceClassification (its own config class and classifier):
    the logits and last hidden states of HF's model equal vspec's on a padded batch; `from_hf(folder)` gives the
    same spec, the same weights bit for bit and the same logits."""
    spec = shrunk(name)
    model = perturbed(vspec.build(spec))
    folder = to_hf(model, tmp_path / name)
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == (PRESETS[name][0], [PRESETS[name][1]])
    hf = loaded(transformers.AutoModelForSequenceClassification, folder)
    assert type(hf).__name__ == PRESETS[name][1]
    ids, mask = padded(spec)
    with torch.no_grad():
        logits, hidden = model(ids, mask), model.forward_features(ids, mask)
        out = hf(input_ids=ids, attention_mask=mask)
        final = hf.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (logits - out.logits).abs().max() < 1e-5 and out.logits.abs().max() > 1e-2
    assert (hidden[real] - final[real]).abs().max() < 1e-5
    back = from_hf(folder).eval()
    assert back.spec == spec
    ours, theirs = model.state_dict(), back.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    with torch.no_grad():
        assert torch.equal(back(ids, mask), logits)


BASES = {  # the base models (num_classes 0): their head is what HF's base model returns beside the hidden states
    "bert_base": ("BertModel", {"kind": "first_token", "pooler": "tanh"}),
    "roberta_base": ("RobertaModel", {"kind": "first_token", "pooler": "tanh"}),
    "electra_small": ("ElectraModel", {"kind": "first_token"}),
    "gpt2": ("GPT2Model", {"kind": "last_token", "pad_id": 0}),
    "gpt": ("OpenAIGPTModel", {"kind": "last_token", "pad_id": 0}),
}


@pytest.mark.parametrize("name", sorted(BASES))
def test_base_models_round_trip_through_automodel(name, tmp_path):
    """num_classes 0: AutoModel reads the base model; every layer's hidden states (HF's output_hidden_states,
    vspec's forward_intermediates) and BERT's and RoBERTa's pooler output equal vspec's; back bit for bit."""
    task, head = BASES[name]
    spec = shrunk(name, num_classes=0, head=head)
    model = perturbed(vspec.build(spec))
    hf = loaded(transformers.AutoModel, to_hf(model, tmp_path))
    assert type(hf).__name__ == task
    ids, mask = padded(spec)
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert (getattr(out, "pooler_output", None) is not None) == bool(head.get("pooler"))
    assert_same_hidden_states(model, out, ids, mask)
    back = from_hf(tmp_path)
    assert back.spec == spec and all(torch.equal(v, back.state_dict()[k]) for k, v in model.state_dict().items())


def test_the_folder_loads_in_a_process_without_vspec(tmp_path):
    """transformers alone reads what to_hf wrote: a new process where `import vspec` fails gives vspec's logits."""
    specs = {"bert": shrunk("bert_base", num_classes=3), "gpt2": shrunk("gpt2")}
    expected = {}
    for name, spec in specs.items():
        model = perturbed(vspec.build(spec))
        to_hf(model, tmp_path / name)
        ids, mask = padded(spec)
        torch.save({"ids": ids, "mask": mask}, tmp_path / f"{name}.pt")
        with torch.no_grad():
            expected[name] = model(ids, mask)
    code = f"""
import sys
sys.modules["vspec"] = None  # any import of vspec fails
import torch, transformers
for name in {sorted(specs)!r}:
    batch = torch.load({str(tmp_path)!r} + f"/{{name}}.pt")
    hf, info = transformers.AutoModelForSequenceClassification.from_pretrained({str(tmp_path)!r} + "/" + name,
                                                                             output_loading_info=True)
    assert not any(info.values()), info
    with torch.no_grad():
        torch.save(hf.eval()(input_ids=batch["ids"], attention_mask=batch["mask"]).logits,
                   {str(tmp_path)!r} + f"/{{name}}.logits.pt")
assert not [m for m in sys.modules if m.split(".")[0] == "vspec" and sys.modules[m] is not None]
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, capture_output=True)
    for name, logits in expected.items():
        assert (torch.load(tmp_path / f"{name}.logits.pt") - logits).abs().max() < 1e-5


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_full_size_preset_maps_on_the_meta_device(name):
    """At full size, on the meta device (no memory): the preset is HF's model type and classifier, and the weights
    written hold the parameters its published entry declares (HF's count)."""
    spec = preset(name)
    config, weights = hf_weights((spec, vspec.build(spec, "meta").state_dict()))
    assert (config.model_type, config.architectures) == (PRESETS[name][0], [PRESETS[name][1]])
    (entry,) = load_weights_table(ROOT / "specs" / f"{name}.py").values()
    assert sum(v.numel() for v in weights.values()) == entry.params


def test_a_gpt_head_without_pad_id_is_written_as_gpt2s_own_config(tmp_path):
    """head.pad_id None (the mask's last real token): pad_token_id None, as GPT-2's released config, with a note;
    HF then classifies a batch of one as vspec does and refuses a larger batch; from_hf gives the spec back."""
    spec = shrunk("gpt2", **{"head.pad_id": None})
    model = perturbed(vspec.build(spec))
    with pytest.warns(ConversionNote, match="head.pad_id None .* refuses batches of more than one"):
        to_hf(model, tmp_path)
    hf = loaded(transformers.AutoModelForSequenceClassification, tmp_path)
    assert hf.config.pad_token_id is None
    ids = torch.randint(3, 100, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (hf(input_ids=ids[:1]).logits - model(ids[:1])).abs().max() < 1e-5
        with pytest.raises(ValueError, match="no padding token"):
            hf(input_ids=ids)
    assert from_hf(tmp_path).spec == spec


def test_labels_are_the_configs_id2label(tmp_path):
    to_hf(perturbed(vspec.build(shrunk("roberta_base", num_classes=3))), tmp_path, labels=["neg", "neu", "pos"])
    hf = loaded(transformers.AutoModelForSequenceClassification, tmp_path)
    assert hf.config.id2label == {0: "neg", 1: "neu", 2: "pos"} and hf.config.label2id["pos"] == 2
    with pytest.raises(ConversionError, match=r"^labels: 3 class names"):
        to_hf(vspec.build(shrunk("roberta_base", num_classes=3)), tmp_path / "two", labels=["a", "b"])
    with pytest.raises(ConversionError, match=r"^labels: the base model \(num_classes 0\) has no classes"):
        to_hf(vspec.build(shrunk("electra_small", num_classes=0, head={"kind": "first_token"})), tmp_path / "two",
              labels=[])
    assert not (tmp_path / "two").exists()


def _refused() -> list[tuple[str, vspec.Model, str]]:
    bert = shrunk("bert_base")
    return [
        ("sot_head", shrunk("bert_base_sot_rte"), r"^head: second_order \(the sot family's\) has no Hugging Face "
                                                  r"equivalent \(bert has first_token\)$"),
        ("refiner", shrunk("electra_small_refiner"), r"^block\.attention: refiner \(the refiner family's\) has no "),
        ("msf", override(bert, {"block.attention": MeanShiftAttention(heads=4)}),
         r"^block\.attention: mean_shift \(the msf family's\)"),
        ("gpt_sot", shrunk("gpt_sot"), r"^head: second_order .*\(openai-gpt has last_token\)$"),
        ("image", vspec.load_spec(ROOT / "specs" / "deit_tiny.py"), r"^embedder: patch \(an image model\)"),
        ("exact_gelu_gpt", shrunk("gpt", **{"block.ffn.act": "gelu"}), r"^block\.ffn\.act: 'gelu' .*'gelu_tanh'"),
        ("drop_path", override(bert, {"drop_path": 0.1}), r"^drop_path: 0\.1 has no Hugging Face equivalent"),
        ("qkv_bias", override(bert, {"block.attention.qkv_bias": False}), r"^block\.attention\.qkv_bias: False"),
        ("pre_norm_bert", override(bert, {"block.kind": "pre_norm"}), r"^block: pre_norm has no .*post_norm"),
        ("two_norm_eps", override(bert, {"embedder.norm.eps": 1e-5}), r"^embedder\.norm\.eps: 1e-05"),
        ("base_head_dropout", override(bert, {"num_classes": 0}), r"^head\.drop: 0\.1 .*\(bert has 0\.0\)"),
        ("gpt_hidden", shrunk("gpt", **{"block.ffn.hidden": 64}), r"^block\.ffn\.hidden: 64 .*\(openai-gpt has 128\)"),
    ]


REFUSED = _refused()


@pytest.mark.parametrize(("spec", "match"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_what_hugging_face_lacks_is_refused_in_one_line_before_anything_is_written(spec, match, tmp_path):
    with pytest.raises(ConversionError, match=match) as info:
        to_hf(vspec.build(spec), tmp_path / "out")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


def test_a_model_on_the_meta_device_and_a_foreign_object_are_refused(tmp_path):
    spec = shrunk("bert_base")
    with pytest.raises(ConversionError, match="on the meta device"):
        to_hf(vspec.build(spec, "meta"), tmp_path / "meta")
    with pytest.raises(ConversionError, match=r"a vspec model or a \(spec, state_dict\) pair, got Linear"):
        to_hf(torch.nn.Linear(2, 2), tmp_path / "linear")
    assert not any(tmp_path.iterdir())
