"""vspec.register_hf(): vspec models as transformers models (vspec/hf.py). Folders round-trip both ways with equal
logits (transformers' `Auto*.from_pretrained` of what `save_pretrained` wrote, of vspec's own folders; vspec's
`from_pretrained` of transformers' folders), `AutoConfig`'s num_labels sizes the classifier, the pipeline gives the
labels of the model's own logits, and importing vspec imports no transformers. Trainer: tests/test_hf_trainer.py."""

import json
import subprocess
import sys

import pytest
import torch

import vspec
from tests.helpers import ROOT
from tests.helpers.checks import perturbed
from tests.helpers.hf import small_text, tokenizer

transformers = pytest.importorskip("transformers")
from transformers import (  # noqa: E402 - after the extra is known to be installed
    AutoConfig,
    AutoModel,
    AutoModelForImageClassification,
    AutoModelForSequenceClassification,
)

from vspec.hf import VspecConfig, VspecForImageClassification, VspecForSequenceClassification, VspecModel  # noqa: E402

TEXT = ["bert_base_sot_rte", "electra_small_refiner", "gpt2", "roberta_base_sot"]


@pytest.fixture(autouse=True, scope="module")
def registered():
    vspec.register_hf()


def _perturbed(spec: vspec.Model) -> torch.nn.Module:
    """The spec's vspec model in eval mode, every weight moved off its initial value."""
    torch.manual_seed(0)
    return perturbed(vspec.build(spec))


def _wrapped(cls, model: torch.nn.Module, **config) -> torch.nn.Module:
    """`cls` (a vspec.hf model) holding `model`'s weights."""
    out = cls(VspecConfig(spec=model.spec, **config)).eval()
    out.model.load_state_dict(model.state_dict())
    return out


def _ids(spec: vspec.Model) -> dict:
    """A right-padded batch of two sequences, 9 and 5 tokens."""
    ids = torch.randint(5, spec.embedder.vocab_size, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    return {"input_ids": ids * mask, "attention_mask": mask}


def test_register_hf_registers_once_and_vspec_alone_imports_no_transformers():
    assert vspec.register_hf() == ["VspecModel", "VspecForSequenceClassification", "VspecForImageClassification"]
    assert type(AutoConfig.for_model("vspec")) is VspecConfig
    mapping = {auto: auto._model_mapping[VspecConfig] for auto in (AutoModel, AutoModelForSequenceClassification,
                                                                   AutoModelForImageClassification)}
    assert list(mapping.values()) == [VspecModel, VspecForSequenceClassification, VspecForImageClassification]
    code = ("import sys, vspec, vspec.weights.folder, vspec.weights.loading; vspec.from_pretrained; vspec.create_model;"
            " print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr[-2000:] + done.stdout


@pytest.mark.parametrize("name", TEXT)
def test_save_pretrained_and_auto_from_pretrained_give_equal_logits(tmp_path, name):
    """SoT's head, Refiner's attention, a causal body: written by save_pretrained, read by
    AutoModelForSequenceClassification in eval mode, the vspec model's logits exactly; vspec reads the folder too."""
    spec = small_text(name)
    model = _perturbed(spec)
    x = _ids(spec)
    with torch.no_grad():
        expected = model(x["input_ids"], attention_mask=x["attention_mask"])
    _wrapped(VspecForSequenceClassification, model).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "vspec" and config["architectures"] == ["VspecForSequenceClassification"]
    assert vspec.from_dict(config["spec"]) == spec
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert type(loaded) is VspecForSequenceClassification and not loaded.training
    with torch.no_grad():
        assert torch.equal(loaded(**x).logits, expected)
        assert torch.equal(vspec.from_pretrained(tmp_path).eval()(x["input_ids"], x["attention_mask"]), expected)


def test_vspec_folders_load_in_transformers_and_the_base_model(tmp_path):
    """vspec.save_pretrained's folder (keys without the `model.` prefix) loads through the Auto classes; AutoModel
    gives the body's last hidden states and the head's features at 0 classes, and its folder reloads in vspec."""
    spec = small_text("bert_base_sot_rte")
    model = _perturbed(spec)
    x = _ids(spec)
    vspec.save_pretrained(model, tmp_path / "vspec")
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "vspec")
    base = AutoModel.from_pretrained(tmp_path / "vspec")
    body = vspec.build(vspec.override(spec, {"num_classes": 0})).eval()
    body.load_state_dict({k: v for k, v in model.state_dict().items() if k in body.state_dict()})
    with torch.no_grad():
        assert torch.equal(loaded(**x).logits, model(x["input_ids"], attention_mask=x["attention_mask"]))
        out = base(**x)
        assert torch.equal(out.last_hidden_state, model.forward_features(x["input_ids"], x["attention_mask"]))
        assert torch.equal(out.pooler_output, body(x["input_ids"], attention_mask=x["attention_mask"]))
    base.save_pretrained(tmp_path / "base")
    assert json.loads((tmp_path / "base" / "config.json").read_text())["architectures"] == ["VspecModel"]
    assert vspec.from_pretrained(tmp_path / "base").num_classes == 0


def test_an_image_model_loads_with_its_computed_buffers(tmp_path):
    """A sin-cos position table is a buffer the build computes and no file holds: transformers' meta-device build
    would leave it empty, so the classes are built where the weights go."""
    spec = vspec.override(vspec.load_spec("simplevit_ti"), {"depth": 2, "dim": 32, "block.attention.heads": 4,
                                                           "img_size": 32, "num_classes": 4})
    model = _perturbed(spec)
    assert "pos_embed" not in model.state_dict() and isinstance(model.pos_embed, torch.Tensor)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    _wrapped(VspecForImageClassification, model).save_pretrained(tmp_path)
    loaded = AutoModelForImageClassification.from_pretrained(tmp_path)
    with torch.no_grad():
        assert torch.equal(loaded(pixel_values=x).logits, model(x))


def test_auto_config_num_labels_sizes_the_classifier(tmp_path):
    """run_glue.py's calls: AutoConfig.from_pretrained(folder, num_labels=3), then the model with that config."""
    spec = small_text("bert_base_sot_rte")
    assert VspecConfig(spec="bert_base_sot_rte").num_labels == 2 == vspec.load_spec("bert_base_sot_rte").num_classes
    _wrapped(VspecForSequenceClassification, _perturbed(spec)).save_pretrained(tmp_path)
    config = AutoConfig.from_pretrained(tmp_path, num_labels=3, finetuning_task="rte")
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path, config=config, ignore_mismatched_sizes=True)
    assert model(**_ids(spec)).logits.shape == (2, 3) and model.model.spec.num_classes == 3
    model.save_pretrained(tmp_path / "three")
    assert json.loads((tmp_path / "three" / "config.json").read_text())["spec"]["num_classes"] == 3
    assert vspec.from_pretrained(tmp_path / "three").num_classes == 3


def test_the_pipeline_gives_the_labels_of_the_model_s_logits(tmp_path):
    spec = small_text("bert_base_sot_rte")
    tok = tokenizer(tmp_path / "tok")
    model = _wrapped(VspecForSequenceClassification, _perturbed(spec), id2label={0: "rotten", 1: "fresh"})
    texts = ["a witty moving film", "the plot is dull and the acting flat", "not good"]
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        probs = model.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).softmax(-1)
    pipe = transformers.pipeline("text-classification", model=model, tokenizer=tok)
    assert model.device == torch.device("cpu") and model.dtype == torch.float32
    got = pipe(texts)
    assert [g["label"] for g in got] == [("rotten", "fresh")[i] for i in probs.argmax(-1).tolist()]
    assert [g["score"] for g in got] == pytest.approx(probs.max(-1).values.tolist(), abs=1e-6)


def test_a_problem_type_the_labels_do_not_say_is_refused():
    model = VspecForSequenceClassification(VspecConfig(spec=small_text("bert_base_sot_rte"),
                                                       problem_type="multi_label_classification"))
    with pytest.raises(ValueError, match=r"^problem_type 'multi_label_classification' with 2 labels of dtype int64: "
                                         r"the vspec model's loss is 'single_label_classification'") as e:
        model(**_ids(model.model.spec), labels=torch.tensor([0, 1]))
    assert "\n" not in str(e.value)


def test_a_config_without_a_spec_or_a_task_of_the_other_kind_is_one_line():
    with pytest.raises(vspec.SpecError, match="holds no spec"):
        VspecForSequenceClassification(VspecConfig())
    with pytest.raises(vspec.SpecError, match="takes a text spec; this one reads images"):
        VspecForSequenceClassification(VspecConfig(spec="deit_tiny"))


def test_gradient_checkpointing_is_the_vspec_model_s():
    model = VspecForSequenceClassification(VspecConfig(spec=small_text("bert_base_sot_rte"))).train()
    switch = "activation" if hasattr(model, "activation_checkpointing_enable") else "gradient"  # transformers 5 / 4
    getattr(model, f"{switch}_checkpointing_enable")()
    assert all(stage.grad_checkpointing for stage in model.model.stages)
    model(**_ids(model.model.spec)).logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    getattr(model, f"{switch}_checkpointing_disable")()
    assert not any(stage.grad_checkpointing for stage in model.model.stages)
