"""Hugging Face's `Trainer` on a plain vspec text model, no wrapper: a tiny BERT-shaped body with SoT's head and a
tiny GPT-2 train (the labels column reaches the forward, the loss is its own), evaluate (compute_metrics, eval_loss
equal to the model's own mean loss), predict (every row, in order, equal to the model's own logits in eval), save
checkpoints and resume from one to the same end as the run not stopped."""

import math

import pytest
import torch

import vspec
from tests.helpers import ROOT
from vspec.spec import override

transformers = pytest.importorskip("transformers")  # the `text` extra, which `make test` installs
pytest.importorskip("accelerate")  # which Trainer requires (the `text` extra)
TINY = {"depth": 2, "dim": 32, "block.attention.heads": 4, "block.ffn.hidden": 64, "embedder.vocab_size": 50,
        "embedder.max_positions": 32, "embedder.seq_len": 16, "num_classes": 2}
HEADS = {"bert_base_sot_rte": {"head.pool.m": 8, "head.pool.n": 8}, "gpt2": {}}


def rows(n: int, seed: int) -> list[dict]:
    """Token ids of random lengths (3..12; 0 is padding), label 1 when token 7 is among them, and a column the
    forward does not name (Trainer drops it)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ids = torch.randint(3, 50, (int(torch.randint(3, 13, (1,), generator=g)),), generator=g)
        if i % 2:
            ids[int(torch.randint(len(ids), (1,), generator=g))] = 7
        out.append({"input_ids": ids.tolist(), "labels": int((ids == 7).any()), "idx": i})
    return out


def collate(features: list[dict]) -> dict:
    """Right padding to the longest row, HF's attention_mask."""
    n = max(len(f["input_ids"]) for f in features)
    ids = torch.zeros(len(features), n, dtype=torch.long)
    for i, f in enumerate(features):
        ids[i, :len(f["input_ids"])] = torch.tensor(f["input_ids"])
    return {"input_ids": ids, "attention_mask": (ids != 0).long(),
            "labels": torch.tensor([f["labels"] for f in features])}


def accuracy(p) -> dict:
    return {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_trainer_trains_evaluates_predicts_and_resumes_the_plain_model(name, tmp_path):
    spec = override(vspec.load_spec(ROOT / "specs" / f"{name}.py"), {**TINY, **HEADS[name]})
    torch.manual_seed(0)
    model = vspec.build(spec)
    train, test = rows(48, 0), rows(20, 1)
    kwargs = dict(use_cpu=True, report_to=[], per_device_train_batch_size=8, per_device_eval_batch_size=6,
                  learning_rate=3e-3, max_steps=6, save_steps=3, logging_steps=1, seed=0, disable_tqdm=True)
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), **kwargs)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=train, eval_dataset=test,
                                   data_collator=collate, compute_metrics=accuracy)
    assert trainer.label_names == ["labels"]  # found in the forward's signature
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = trainer.train()
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses) and math.isfinite(result.training_loss)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())

    metrics = trainer.evaluate()
    assert {"eval_loss", "eval_accuracy"} <= metrics.keys()
    batch = collate(test)
    model.eval()
    with torch.no_grad():
        own = model(**batch)  # loss and logits, the batch padded as one
        alone = torch.cat([model(torch.tensor([r["input_ids"]])) for r in test])
    assert abs(metrics["eval_loss"] - own.loss.item()) < 1e-5
    assert (own.logits - alone).abs().max() < 1e-5  # padding changes no row

    predicted = trainer.predict(test)
    assert predicted.predictions.shape == (20, 2) and predicted.label_ids.tolist() == [r["labels"] for r in test]
    assert (torch.from_numpy(predicted.predictions) - alone).abs().max() < 1e-5  # every row, in order
    assert abs(predicted.metrics["test_accuracy"] - accuracy(predicted)["accuracy"]) == 0

    checkpoint = tmp_path / "out" / "checkpoint-3"
    assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "trainer_state.json").is_file()
    torch.manual_seed(1)
    again = transformers.Trainer(model=vspec.build(spec), args=transformers.TrainingArguments(
        output_dir=str(tmp_path / "again"), **kwargs), train_dataset=train, data_collator=collate)
    resumed = again.train(resume_from_checkpoint=str(checkpoint))
    assert again.state.global_step == 6 and math.isfinite(resumed.training_loss)
    assert [r["loss"] for r in again.state.log_history if "loss" in r] == losses  # steps 4-6 again, as logged
    assert all(torch.equal(v, again.model.state_dict()[k]) for k, v in model.state_dict().items())  # exact
