"""tools/train.py and tools/eval.py on text bodies (issue 22): GLUE-format folders written here (CoLA- and
STS-B-shaped) train and evaluate with the task's metric, a run stopped mid-epoch resumes to the same weights, a
Hugging Face checkpoint's body starts a run (--init hf:DIR), and the flags that do not apply are refused."""

import json
import random
import re
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

import vspec
from tests.helpers.text_runs import (
    BAD,
    GOOD,
    args,
    cola_folder,
    records,
    sentence,  # noqa: F401
)
from vspec.cli.eval import main as eval_main
from vspec.cli.train import main as train_main
from vspec.convert import from_hf, spec_from_hf
from vspec.train import checkpoints, faults

pytest.importorskip("tokenizers")
ROOT = Path(__file__).resolve().parents[3]


def stsb_folder(folder: Path) -> Path:
    """STS-B's format (a header; sentence1, sentence2, score in [0, 5])."""
    rng = random.Random(1)
    folder.mkdir(parents=True)
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    for name, n in (("train.tsv", 64), ("dev.tsv", 32)):
        rows = [header]
        for i in range(n):
            score = rng.uniform(0, 5)
            rows.append(f"{i}\tmain\tx\t2012\t{i:04d}\tnone\tnone\t{sentence(rng, GOOD)}\t{sentence(rng, BAD)}\t"
                        f"{score:.3f}\n")
        (folder / name).write_text("".join(rows))
    return folder


def test_a_cola_folder_trains_and_evaluates_with_matthews_correlation(text_spec, tmp_path, capsys):
    data, out = cola_folder(tmp_path / "cola"), tmp_path / "run"
    assert train_main(args(text_spec, out, data, "cola", "--epochs", "2")) == 0
    lines = records(out)
    assert [r["epoch"] for r in lines] == [1, 2] and all({"val_matthews", "val_accuracy"} <= r.keys() for r in lines)
    assert (out / "tokenizer" / "tokenizer.json").is_file() and (out / "curves.png").stat().st_size > 1000
    assert "val matthews" in capsys.readouterr().out
    ckpt = checkpoints.load(out / "last.pt")
    assert ckpt["global_step"] == 8 and ckpt["best_score"] == max(r["val_matthews"] for r in lines)
    assert eval_main([str(out / "last.pt"), "--data", "glue", "--task", "cola", "--data-dir", str(data),
                      "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["task"] == "cola" and result["samples"] == 32
    assert result["metrics"]["matthews"] == pytest.approx(lines[-1]["val_matthews"], abs=1e-12)
    # the metric recomputed here from the model's own predictions, by its formula
    model = vspec.load(out / "last.pt").eval()
    from vspec.train.text.readers import read_glue
    from vspec.train.text.tokenizer import Tokenizer

    tok = Tokenizer(out / "tokenizer")
    examples = read_glue(data, "cola", "validation")
    with torch.no_grad():
        p = np.array([int(model(torch.tensor([tok.encode(e.a, None, 24)[0]])).argmax()) for e in examples])
        # the run's tokenizer folder loads complete in transformers: a padded batch, the run's truncation
        hf = pytest.importorskip("transformers").AutoTokenizer.from_pretrained(out / "tokenizer")
        batch = hf([e.a for e in examples], padding=True, truncation=True, return_tensors="pt")
        assert batch["input_ids"].shape[1] <= 24 and torch.equal(model(**batch).argmax(1), torch.tensor(p))
    y = np.array([e.label for e in examples])
    tp, tn = ((p == 1) & (y == 1)).sum(), ((p == 0) & (y == 0)).sum()
    fp, fn = ((p == 1) & (y == 0)).sum(), ((p == 0) & (y == 1)).sum()
    denominator = np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
    mcc = (tp * tn - fp * fn) / denominator if denominator else 0.0
    assert lines[-1]["val_matthews"] == pytest.approx(mcc, abs=1e-9)


def test_a_gpt_body_trains_without_token_types_and_its_tokenizer_returns_none(tmp_path, capsys):
    """A causal body without token types (GPT-2's) is given none: the batches and the run's tokenizer folder leave
    token_type_ids out, which the body refuses (issue 60: its first step failed)."""
    spec = vspec.override(vspec.load_spec("gpt2"), {"depth": 1, "dim": 32, "block.attention.heads": 2,
                                                    "block.ffn.hidden": 64, "embedder.vocab_size": 200,
                                                    "embedder.seq_len": 24, "embedder.max_positions": 32})
    path = tmp_path / "gpt.json"
    path.write_text(vspec.to_json(spec))
    data, out = cola_folder(tmp_path / "cola"), tmp_path / "run"
    assert train_main(args(path, out, data, "cola", "--epochs", "1")) == 0
    assert eval_main([str(out / "last.pt"), "--data", "glue", "--task", "cola", "--data-dir", str(data)]) == 0
    hf = pytest.importorskip("transformers").AutoTokenizer.from_pretrained(out / "tokenizer")
    batch = hf(["the film was good.", "a dull plot"], padding=True, return_tensors="pt")
    assert set(batch) == {"input_ids", "attention_mask"}
    with torch.no_grad():
        assert vspec.load(out / "last.pt")(**batch).shape == (2, 2)
    assert "error" not in capsys.readouterr().err


def test_an_stsb_folder_trains_a_regression_with_correlations(text_spec, tmp_path, capsys):
    data, out = stsb_folder(tmp_path / "stsb"), tmp_path / "run"
    assert train_main(args(text_spec, out, data, "stsb", "--epochs", "1")) == 0
    assert "setting num_classes = 1" in capsys.readouterr().err
    line = records(out)[-1]
    assert {"val_pearson", "val_spearman", "val_loss"} <= line.keys()
    assert all(np.isfinite(line[k]) for k in ("val_pearson", "val_spearman", "val_loss"))
    assert vspec.load(out / "last.pt").spec.num_classes == 1


def test_a_text_run_stopped_mid_epoch_resumes_to_the_same_weights(text_spec, tmp_path, monkeypatch, capsys):
    data = cola_folder(tmp_path / "cola")
    ref, out = tmp_path / "ref", tmp_path / "cut"
    assert train_main(args(text_spec, ref, data, "cola", "--epochs", "2")) == 0
    monkeypatch.setattr(faults, "_passes", {})
    monkeypatch.setenv("VSPEC_TEST_KILL_AT", "step:5:TERM")  # epoch 2, batch 1
    assert train_main(args(text_spec, out, data, "cola", "--epochs", "2")) == 128 + signal.SIGTERM
    assert checkpoints.load(out / "last.pt")["batches_done"] == 1
    monkeypatch.delenv("VSPEC_TEST_KILL_AT")
    assert train_main(args(text_spec, out, data, "cola", "--epochs", "2", "--resume")) == 0
    a, b = checkpoints.load(ref / "last.pt")["state_dict"], checkpoints.load(out / "last.pt")["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert records(out) == [{**r, **{k: records(out)[i][k] for k in ("samples_per_s", "epoch_time_s")}}
                            for i, r in enumerate(records(ref))]
    capsys.readouterr()
    assert train_main(args(text_spec, out, data, "rte", "--epochs", "2", "--resume")) == 2  # another task
    assert "--resume of a different run" in capsys.readouterr().err


def test_init_from_a_hugging_face_folder_loads_the_body(tmp_path, capsys):
    """A BERT checkpoint written by save_pretrained: --init hf:DIR starts the SoT spec's body from it (every body
    weight equal), the head fresh; a body that does not fit is refused."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                     vocab_size=200, max_position_embeddings=24, num_labels=2)
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "hf")
    base = spec_from_hf(config, classifier=True)
    spec = tmp_path / "sot.json"
    import attrs

    spec.write_text(vspec.to_json(attrs.evolve(base, head=vspec.spec.language_head(6, 4))))
    data, out = cola_folder(tmp_path / "cola"), tmp_path / "run"
    assert train_main(args(spec, out, data, "cola", "--epochs", "1", "--init", f"hf:{tmp_path / 'hf'}",
                           "--max-steps", "1", "--lr", "1e-12", "--max-len", "24")) == 0
    assert re.search(r"--init: the checkpoint's head \(.*classifier.weight.*\) is not used", capsys.readouterr().err)
    hf = from_hf(tmp_path / "hf").state_dict()
    ours = checkpoints.load(out / "last.pt")["state_dict"]
    body = [k for k in hf if not k.startswith("head.")]
    assert body and all(torch.allclose(ours[k], hf[k], atol=1e-6) for k in body)  # one step at lr 1e-12
    wrong = tmp_path / "wrong.json"
    wrong.write_text(vspec.to_json(vspec.override(attrs.evolve(base, head=vspec.spec.language_head(6, 4)),
                                                  {"dim": 64, "block.ffn.hidden": 128})))
    assert train_main(args(wrong, tmp_path / "w", data, "cola", "--init", f"hf:{tmp_path / 'hf'}")) == 2
    assert "does not fit the spec's" in capsys.readouterr().err


def test_text_flags_are_checked_in_one_line(text_spec, tmp_path, capsys):
    data = cola_folder(tmp_path / "cola")
    for extra, match in [
        (("--mixup", "0.8"), "--mixup / --cutmix mix images"),
        (("--max-len", "100"), "--max-len 100: the spec's position table holds 64 tokens"),
        (("--init", "bert"), "--init: 'bert': hf:DIR"),
    ]:
        assert train_main(args(text_spec, tmp_path / "x", data, "cola", *extra)) == 2
        err = capsys.readouterr().err
        assert re.search(match, err) and err.count("\n") == 1, err
    assert train_main([str(text_spec), "--data", "glue", "--out", str(tmp_path / "y")]) == 2
    assert "needs --task" in capsys.readouterr().err
    assert train_main([str(text_spec), "--data", "digits", "--out", str(tmp_path / "z")]) == 2
    assert "a text body trains on hf or rt-polarity or glue" in capsys.readouterr().err
    image = str(ROOT / "specs/demo_digits.py")
    assert train_main([image, "--data", "rt-polarity", "--max-len", "8", "--out", str(tmp_path / "i")]) == 2
    assert "train.py: error: --data rt-polarity: for a text body" in capsys.readouterr().err
    assert train_main([image, "--data", "digits", "--task", "cola", "--out", str(tmp_path / "j")]) == 2
    assert "train.py: error: --task: for a text data set (hf, rt-polarity, glue); digits holds images" in \
        capsys.readouterr().err


def test_the_text_demo_runs_both_heads_and_prints_its_table(tmp_path, capsys):
    """tools/text_demo.py, cut to 3 steps a run: both heads train on rt-polarity from one shared tokenizer and the
    table has a row per head beside the majority class's share."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("text_demo", ROOT / "tools/text_demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    assert demo.main(["--out", str(tmp_path), "--epochs", "1", "--seeds", "0", "--max-steps", "3"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"majority class 5\d\.\d\d %", out)
    assert re.search(r"^\| first_token \| \d+\.\d\d % \|", out, re.M) and re.search(r"^\| sot \| \d+\.\d\d % \|", out,
                                                                                   re.M)
    assert not (tmp_path / "sot-seed0" / "tokenizer").exists()  # the first run's vocabulary, shared
    assert vspec.load(tmp_path / "sot-seed0" / "last.pt").spec.head.kind == "second_order"


@pytest.mark.slow
def test_a_text_run_killed_anywhere_resumes_to_the_uninterrupted_end(text_spec, tmp_path):
    """SIGKILL (the crash-test hook) inside epoch 1's best.pt copy, then mid epoch 2: each --resume goes on (the
    vocabulary in OUT/tokenizer reused), and the end equals the uninterrupted run's weights and records."""
    import os
    import subprocess
    import sys

    data = cola_folder(tmp_path / "cola")

    def train(out, *extra, kill_at=None):
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
        if kill_at:
            env["VSPEC_TEST_KILL_AT"] = kill_at
        return subprocess.run([sys.executable, str(ROOT / "tools/train.py"), *args(text_spec, out, data, "cola",
                                                                                   "--epochs", "2", *extra)],
                              env=env, capture_output=True, text=True, timeout=300)

    ref, out = tmp_path / "ref", tmp_path / "cut"
    assert train(ref).returncode == 0
    assert train(out, kill_at="write:2").returncode == -9  # inside epoch 1's best.pt copy
    assert checkpoints.load(out / "last.pt")["epoch"] == 1 and not (out / "best.pt").exists()
    assert train(out, "--resume", kill_at="step:2").returncode == -9  # mid epoch 2 (steps counted per process)
    done = train(out, "--resume")
    assert done.returncode == 0, done.stderr[-2000:]
    a, b = checkpoints.load(ref / "last.pt")["state_dict"], checkpoints.load(out / "last.pt")["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    keep = ("train_loss", "val_loss", "val_matthews", "val_accuracy", "lr", "step")
    assert [{k: r[k] for k in keep} for r in records(out)] == [{k: r[k] for k in keep} for r in records(ref)]
