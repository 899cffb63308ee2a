"""The real client for text (issue 60): small vspec text presets (BERT with SoT's head, GPT-2) through Hugging Face's
`Trainer` with `compute_metrics` after `vspec.register_hf()`: train, evaluate, predict (every row, in order, the
model's own logits in eval mode), save, resume from a checkpoint (the uninterrupted run's weights), reload through
`AutoModelForSequenceClassification`; `BertForSequenceClassification` of the same size on the same data gives as
many rows, in the same order, and the same metrics keys, and a vspec BERT holding its weights the same predictions
after the same training. The plain vspec model's folder (weights alone) reloads with its spec named."""

import numpy as np
import pytest
import torch

import vspec
from tests.helpers.hf import SHRINK, rows, small_text, tokenizer

transformers = pytest.importorskip("transformers")
from transformers import (  # noqa: E402 - after the extra is known to be installed
    AutoModelForSequenceClassification,
    BertConfig,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

from vspec.hf import VspecConfig, VspecForSequenceClassification  # noqa: E402

N = 30  # rows of the data set: 4 training steps of 8 per epoch, evaluation batches of 7 (the last one short)
PRESETS = {"bert_base_sot_rte": {"types": True}, "gpt2": {"types": False}}


@pytest.fixture(autouse=True, scope="module")
def registered():
    vspec.register_hf()


def accuracy(p) -> dict[str, float]:
    return {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())}


def _trainer(model, tok, data, out, **kw) -> Trainer:
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=8, per_device_eval_batch_size=7,
                             num_train_epochs=2, learning_rate=1e-3, save_strategy="epoch", logging_strategy="no",
                             seed=0, use_cpu=True, report_to=[], **kw)
    return Trainer(model=model, args=args, train_dataset=data, eval_dataset=data, processing_class=tok,
                   data_collator=DataCollatorWithPadding(tok), compute_metrics=accuracy)


def _vspec(spec: vspec.Model) -> VspecForSequenceClassification:
    torch.manual_seed(0)
    return VspecForSequenceClassification(VspecConfig(spec=spec))


def _own_logits(model: torch.nn.Module, data: list[dict]) -> np.ndarray:
    """The model's logits in eval mode, each row alone (no padding)."""
    model.eval()
    with torch.no_grad():
        return np.concatenate([model(**{k: torch.tensor([v]) for k, v in r.items() if k != "labels"}).logits.numpy()
                               for r in data])


@pytest.mark.parametrize("name", PRESETS)
def test_trainer_trains_evaluates_predicts_saves_resumes_and_reloads(tmp_path, name):
    tok = tokenizer(tmp_path / "tok", **PRESETS[name])
    data = rows(tok, N)
    spec = small_text(name)
    trainer = _trainer(_vspec(spec), tok, data, tmp_path / "run")
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    metrics = trainer.evaluate()
    assert {"eval_loss", "eval_accuracy"} <= metrics.keys() and np.isfinite(metrics["eval_loss"])
    got = trainer.predict(data)
    assert got.predictions.shape == (N, 2) and got.label_ids.tolist() == [r["labels"] for r in data]
    np.testing.assert_allclose(got.predictions, _own_logits(trainer.model, data), rtol=0, atol=1e-5)
    assert got.metrics["test_accuracy"] == pytest.approx(accuracy(got)["accuracy"])

    trainer.save_model(tmp_path / "final")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (tmp_path / "final").iterdir()}
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "final")
    np.testing.assert_array_equal(_own_logits(reloaded, data), _own_logits(trainer.model, data))
    assert vspec.from_pretrained(tmp_path / "final").spec == spec

    resumed = _trainer(_vspec(spec), tok, data, tmp_path / "run")
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-4"))  # after the first epoch
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[key], value), key


def test_bert_for_sequence_classification_gives_the_same_rows_and_keys(tmp_path):
    """HF's BERT of the same size on the same data and arguments: the same prediction rows and metrics keys as the
    vspec model with SoT's head; a vspec BERT body with HF's classifier head holding its weights (dropout off)
    predicts the same before and after the same training."""
    tok = tokenizer(tmp_path / "tok")
    data = rows(tok, N)
    config = BertConfig(vocab_size=SHRINK["embedder.vocab_size"], hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=32,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=2)
    torch.manual_seed(0)
    hf = BertForSequenceClassification(config)
    body = vspec.convert.from_hf(hf)
    ours = VspecForSequenceClassification(VspecConfig(spec=body.spec))
    ours.model.load_state_dict(body.state_dict())
    sot = _trainer(_vspec(small_text("bert_base_sot_rte")), tok, data, tmp_path / "sot")
    results = {}
    for name, model in (("hf", hf), ("vspec", ours), ("sot", None)):
        trainer = sot if model is None else _trainer(model, tok, data, tmp_path / name)
        first = trainer.predict(data).predictions
        trainer.train()
        results[name] = (first, trainer.evaluate(), trainer.predict(data))
    hf_first, hf_eval, hf_pred = results["hf"]
    for name in ("vspec", "sot"):
        first, evaluated, pred = results[name]
        assert pred.predictions.shape == hf_pred.predictions.shape
        assert pred.label_ids.tolist() == hf_pred.label_ids.tolist() == [r["labels"] for r in data]
        assert evaluated.keys() == hf_eval.keys() and pred.metrics.keys() == hf_pred.metrics.keys()
    first, _, pred = results["vspec"]
    np.testing.assert_allclose(first, hf_first, rtol=0, atol=1e-5)
    np.testing.assert_allclose(pred.predictions, hf_pred.predictions, rtol=0, atol=1e-4)


def test_the_plain_model_s_folder_reloads_with_its_spec_named(tmp_path):
    """Trainer.save_model of a model that is no PreTrainedModel writes model.safetensors alone: refused in one line
    saying so, loaded with its spec named (vspec.from_pretrained(spec=...), create_model's checkpoint_path)."""
    tok = tokenizer(tmp_path / "tok")
    spec = small_text("bert_base_sot_rte")
    torch.manual_seed(0)
    model = vspec.build(spec)
    trainer = _trainer(model, tok, rows(tok, 8), tmp_path / "run", label_names=["labels"])
    trainer.train()
    trainer.save_model(tmp_path / "plain")
    assert "config.json" not in {p.name for p in (tmp_path / "plain").iterdir()}
    with pytest.raises(vspec.SpecError) as e:
        vspec.from_pretrained(tmp_path / "plain")
    assert str(e.value) == (f"{tmp_path / 'plain' / 'config.json'}: no such file, the folder holds weights alone: "
                            "what Hugging Face's Trainer.save_model writes of a model that is not a PreTrainedModel; "
                            "name its spec (vspec.from_pretrained(folder, spec=...), vspec.create_model(spec, "
                            "checkpoint_path=folder)), or train the vspec.register_hf() model, whose save_model writes "
                            "config.json")
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(vspec.to_json(spec))
    for loaded in (vspec.from_pretrained(tmp_path / "plain", spec=spec),
                   vspec.create_model(spec_file, checkpoint_path=tmp_path / "plain")):
        assert loaded.state_dict().keys() == model.state_dict().keys()
        assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    with pytest.raises(vspec.SpecError, match=r"config.json: holds another spec than the one given"):
        vspec.from_pretrained(vspec.save_pretrained(model, tmp_path / "full"), spec=small_text("bert_base_sot_rte",
                                                                                               num_classes=3))


def test_the_benchmark_s_trainer_row_is_its_rounds():
    """benchmarks/text.py --trainer at a tiny size: one row, its ratio within its rounds' range."""
    from argparse import Namespace

    from benchmarks import text

    row = text.trainer_row(Namespace(trainer_size=(1, 64), batch_size=2, seq_len=16, steps=1, rounds=1))
    assert row["rounds"] == 1 and row["ratio_min"] <= row["ratio"] <= row["ratio_max"]
    assert row["mode"] == "Trainer.train" and row["reference_rate"] > 0 and row["vspec_rate"] > 0
