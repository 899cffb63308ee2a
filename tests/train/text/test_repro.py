"""Text runs as reproducible as image runs (issue 32, items 1-3 and 6): the default WordPiece vocabulary is the same
file on every run (equal to a reference learned from scratch here, and to the `tokenizers` trainer's where no tie
decides), two identical text runs are bit-identical, --resume and eval.py refuse a tokenizer other than the run's,
and tokenizer folders or GLUE files that cannot be read are one line."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from tests.helpers.text_runs import args, cola_folder, records  # noqa: F401 - text_spec is a fixture
from vspec.cli.eval import main as eval_main
from vspec.cli.train import main as train_main
from vspec.train import checkpoints
from vspec.train.data.registry import DataError
from vspec.train.text.batches import text_datasets
from vspec.train.text.readers import MAX_FIELD, read_glue, read_rt_polarity
from vspec.train.text.tokenizer import SPECIAL, Tokenizer, train_wordpiece
from vspec.train.text.wordpiece import learn, word_counts

pytest.importorskip("tokenizers")
ROOT = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------- the vocabulary
def reference_vocabulary(counts: dict[str, int], vocab_size: int) -> tuple[list[str], list[int]]:
    """WordPiece's byte-pair learning written from its description, every pair recounted at every merge: the
    vocabulary and, per merge, how far its pair's count was ahead of the next pair's (0: a tie, decided by the
    smaller pair in string order)."""
    chars = Counter()
    for word, n in counts.items():
        for i, c in enumerate(word):
            chars[c] += n
            if i:
                chars["##" + c] += n
    vocab = list(SPECIAL)
    vocab += sorted(sorted(chars, key=lambda s: (-chars[s], s))[:vocab_size - len(vocab)])
    words = {w: [w[0]] + ["##" + c for c in w[1:]] for w in counts}
    margins = []
    while len(vocab) < vocab_size:
        pairs = Counter()
        for w, pieces in words.items():
            for pair in zip(pieces, pieces[1:]):
                pairs[pair] += counts[w]
        if not pairs:
            break
        ranked = sorted(pairs, key=lambda p: (-pairs[p], p))
        a, b = ranked[0]
        margins.append(pairs[(a, b)] - (pairs[ranked[1]] if len(ranked) > 1 else 0))
        merged = a + b[2:]
        if merged not in vocab:
            vocab.append(merged)
        for w, pieces in words.items():
            out, j = [], 0
            while j < len(pieces):
                if pieces[j:j + 2] == [a, b]:
                    out.append(merged)
                    j += 2
                else:
                    out.append(pieces[j])
                    j += 1
            words[w] = out
    return vocab, margins


def counts_of(texts):
    from tokenizers import normalizers, pre_tokenizers

    return word_counts(texts, normalizers.BertNormalizer(lowercase=True).normalize_str,
                       pre_tokenizers.BertPreTokenizer().pre_tokenize_str)


def alphabet(counts) -> int:
    return len({p for w in counts for i, c in enumerate(w) for p in ([c, "##" + c] if i else [c])})


def test_the_vocabulary_is_the_reference_learned_from_scratch():
    """On 300 review snippets and 120 merges (ties among them), the incremental learner gives the reference's
    vocabulary, in its order."""
    counts = counts_of([e.a for e in read_rt_polarity("train")[:300]])
    size = len(SPECIAL) + alphabet(counts) + 120
    ref, margins = reference_vocabulary(counts, size)
    assert 0 in margins and len(ref) == size  # ties were decided
    assert learn(counts, size, SPECIAL) == ref
    # a budget smaller than the alphabet keeps the most frequent characters
    assert learn(counts, 40, SPECIAL) == reference_vocabulary(counts, 40)[0]


def test_without_ties_it_is_the_vocabulary_of_the_tokenizers_trainer():
    """Where no tie decides a merge, `tokenizers`' WordPieceTrainer learns the same vocabulary (as a set: it
    numbers its pieces in hash order), on every one of its runs."""
    from tokenizers import Tokenizer as Fast
    from tokenizers import models, normalizers, pre_tokenizers, trainers

    texts = [e.a for e in read_rt_polarity("train")[:300]]
    counts = counts_of(texts)
    size = len(SPECIAL) + alphabet(counts) + 9
    ref, margins = reference_vocabulary(counts, size)
    assert min(margins) > 0  # no tie among these merges
    for _ in range(3):
        tok = Fast(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=size, special_tokens=list(SPECIAL),
                                                                 show_progress=False))
        assert set(tok.get_vocab()) == set(learn(counts, size, SPECIAL))


def test_the_tokenizer_file_is_the_same_in_every_process(tmp_path):
    """Two processes with other string hashes and thread counts write byte-identical tokenizer.json files (the
    `tokenizers` trainer gave four different files in four runs)."""
    code = ("import sys; from vspec.train.text.readers import read_rt_polarity as r; "
            "from vspec.train.text.tokenizer import train_wordpiece as t; "
            "t([e.a for e in r('train')[:3000]], sys.argv[1], vocab_size=2000)")
    for i, (seed, threads) in enumerate((("1", "1"), ("2", "2"))):
        env = dict(os.environ, PYTHONHASHSEED=seed, RAYON_NUM_THREADS=threads, PYTHONPATH=str(ROOT))
        subprocess.run([sys.executable, "-c", code, str(tmp_path / str(i))], env=env, check=True, timeout=300)
    first = (tmp_path / "0" / "tokenizer.json").read_bytes()
    assert first == (tmp_path / "1" / "tokenizer.json").read_bytes()
    vocab = json.loads(first)["model"]["vocab"]
    assert len(vocab) == 2000 and list(vocab)[:5] == list(SPECIAL) and list(vocab.values()) == list(range(2000))
    tok = Tokenizer(tmp_path / "0")  # every training text encodes without the unknown token
    assert all(tok.unk_id not in tok.encode(e.a, None, 512)[0] for e in read_rt_polarity("train")[:3000])


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return checkpoints.load(out / "last.pt")["state_dict"]


TIMINGS = ("samples_per_s", "epoch_time_s")


@pytest.mark.parametrize("data", ["glue", "rt-polarity"])
def test_two_identical_text_runs_are_bit_identical(text_spec, tmp_path, data):  # noqa: F811
    """The same command twice with the default tokenizer: the same vocabulary file, metrics and weights."""
    folder = cola_folder(tmp_path / "cola", n_train=600, n_dev=64)
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        argv = args(text_spec, out, folder, "cola", "--epochs", "1", "--max-steps", "12")
        if data == "rt-polarity":
            argv = [str(text_spec), "--data", "rt-polarity", *argv[argv.index("--out"):]]
        assert train_main(argv) == 0
    a, b = outs
    assert (a / "tokenizer" / "tokenizer.json").read_bytes() == (b / "tokenizer" / "tokenizer.json").read_bytes()
    assert [{k: v for k, v in r.items() if k not in TIMINGS} for r in records(a)] == \
           [{k: v for k, v in r.items() if k not in TIMINGS} for r in records(b)]
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


# ---------------------------------------------------------------- the run's tokenizer, checked
def test_resume_and_eval_refuse_a_tokenizer_other_than_the_runs(text_spec, tmp_path, capsys):  # noqa: F811
    data = cola_folder(tmp_path / "cola")
    other = cola_folder(tmp_path / "other", n_train=40)
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    assert train_main(args(text_spec, out, data, "cola", "--epochs", "1")) == 0
    assert train_main(args(text_spec, elsewhere, other, "cola", "--epochs", "1")) == 0
    saved = checkpoints.load(out / "last.pt")["tokenizer"]
    assert list(saved) == ["tokenizer.json", "tokenizer_config.json"] and len(saved["tokenizer.json"]) == 64
    capsys.readouterr()
    mine = {f.name: f.read_bytes() for f in (out / "tokenizer").iterdir()}
    resume = args(text_spec, out, data, "cola", "--epochs", "2", "--resume")
    evaluate = [str(out / "last.pt"), "--data", "glue", "--task", "cola", "--data-dir", str(data)]

    (out / "tokenizer" / "tokenizer.json").write_bytes((elsewhere / "tokenizer" / "tokenizer.json").read_bytes())
    assert train_main(resume) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not the tokenizer the run was trained with (tokenizer.json changed)" in err
    assert eval_main(evaluate) == 2
    assert "(tokenizer.json changed)" in capsys.readouterr().err

    for f in (out / "tokenizer").iterdir():
        f.unlink()
    (out / "tokenizer").rmdir()
    assert train_main(resume) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out / 'tokenizer'} is missing" in err
    assert not (out / "tokenizer").exists()  # not retrained behind the user's back

    (out / "tokenizer").mkdir()
    for name, content in mine.items():
        (out / "tokenizer" / name).write_bytes(content)
    assert train_main(resume) == 0
    assert [r["epoch"] for r in records(out)] == [1, 2]
    assert eval_main(evaluate) == 0

    # a tokenizer given with --tokenizer: a file added to its folder is a change too
    given = tmp_path / "given"
    train_wordpiece([e.a for e in read_glue(data, "cola", "train")], given, vocab_size=200)
    run = tmp_path / "given_run"
    assert train_main(args(text_spec, run, data, "cola", "--epochs", "1", "--tokenizer", str(given))) == 0
    (given / "vocab.txt").write_text("[PAD]\n")
    capsys.readouterr()
    assert train_main(args(text_spec, run, data, "cola", "--epochs", "2", "--tokenizer", str(given), "--resume")) == 2
    assert "(vocab.txt added)" in capsys.readouterr().err


def test_a_checkpoint_without_the_field_or_with_a_bad_one(text_spec, tmp_path, capsys):  # noqa: F811
    """A checkpoint of the previous release (no tokenizer field; its best score named `best_top1`) still resumes,
    its best score kept; a field that is not file hashes is refused when the checkpoint is read."""
    from vspec.weights.checkpoint import with_checksum

    data, out = cola_folder(tmp_path / "cola"), tmp_path / "run"
    assert train_main(args(text_spec, out, data, "cola", "--epochs", "1")) == 0
    ckpt = torch.load(out / "last.pt", weights_only=True)
    old = {k: v for k, v in ckpt.items() if k not in ("tokenizer", "sha256", "best_score")}
    old["best_top1"] = ckpt["best_score"]
    torch.save(with_checksum(old), out / "last.pt")
    assert checkpoints.load(out / "last.pt")["best_score"] == ckpt["best_score"]
    assert train_main(args(text_spec, out, data, "cola", "--epochs", "2", "--resume")) == 0
    assert checkpoints.load(out / "last.pt")["best_score"] == max(r["val_matthews"] for r in records(out))
    bad = {**old, "tokenizer": {"tokenizer.json": "not a digest"}}
    torch.save(with_checksum(bad), out / "last.pt")
    capsys.readouterr()
    assert train_main(args(text_spec, out, data, "cola", "--epochs", "3", "--resume")) == 2
    assert "the checkpoint's 'tokenizer' is not the sha256 of each tokenizer file" in capsys.readouterr().err


def test_a_tokenizer_that_cannot_represent_the_text_is_refused(text_spec, tmp_path, capsys):  # noqa: F811
    data = cola_folder(tmp_path / "cola")
    config_only = tmp_path / "config_only"
    config_only.mkdir()
    (config_only / "tokenizer_config.json").write_text('{"tokenizer_class": "BertTokenizer"}')
    digits = tmp_path / "digits"
    train_wordpiece(["0 1 2 3 4 5 6 7 8 9 " * 20, "a b"], digits, vocab_size=200)
    for folder, needle in ((config_only, "holds only its 5 special tokens"),
                           (digits, "of the tokens of the first 64 training examples are its unknown token '[UNK]'")):
        assert train_main(args(text_spec, tmp_path / "run", data, "cola", "--tokenizer", str(folder))) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err and str(folder) in err, err
        assert not (tmp_path / "run" / "last.pt").exists()


# ---------------------------------------------------------------- files that cannot be read
def _tokenizer_json(tmp_path) -> bytes:
    train_wordpiece(["a small text to learn from"], tmp_path / "good", vocab_size=60)
    return (tmp_path / "good" / "tokenizer.json").read_bytes()


@pytest.mark.parametrize("case", ["random bytes", "not JSON", "a JSON list", "a wrong table", "truncated", "empty",
                                  "binary vocab.txt", "a FIFO", "/dev/zero", "/proc/self/mem", "dangling"])
def test_tokenizer_files_that_cannot_be_read_are_one_line(tmp_path, case):
    folder = tmp_path / "tok"
    folder.mkdir()
    file = folder / "tokenizer.json"
    good = _tokenizer_json(tmp_path)
    if case == "random bytes":
        file.write_bytes(bytes(range(256)) * 8)
    elif case == "not JSON":
        file.write_text("vocab = 1\n")
    elif case == "a JSON list":
        file.write_text("[1, 2, 3]")
    elif case == "a wrong table":
        file.write_text(json.dumps({**json.loads(good), "model": {"type": "WordPiece", "vocab": [1, 2]}}))
    elif case == "truncated":
        file.write_bytes(good[:len(good) // 2])
    elif case == "empty":
        file.write_bytes(b"")
    elif case == "binary vocab.txt":
        (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "BertTokenizer"}')
        (folder / "vocab.txt").write_bytes(b"\xff\xfe\x00" * 100)
    elif case == "a FIFO":
        os.mkfifo(file)
    elif case in ("/dev/zero", "/proc/self/mem"):
        file.symlink_to(case)
    elif case == "dangling":
        file.symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(DataError) as info:
        Tokenizer(folder)
    message = str(info.value)
    assert "\n" not in message and str(folder) in message, message


TSV_CASES = ["empty", "header only", "latin-1", "a field over Python's csv limit", "a field over vspec's limit",
             "a folder", "a FIFO", "/proc/self/mem", "/dev/zero"]


@pytest.mark.parametrize("case", TSV_CASES)
def test_glue_files_that_cannot_be_read_are_one_line(tmp_path, case):
    """CoLA has no header, SST-2 one: each bad file is one DataError naming it (its line, where it has one); a field
    of 200,000 characters, past Python's csv limit of 131,072, is read."""
    task = "cola" if case in ("a field over Python's csv limit", "a field over vspec's limit") else "sst2"
    tsv = tmp_path / "train.tsv"
    if case == "empty":
        tsv.write_text("")
    elif case == "header only":
        tsv.write_text("sentence\tlabel\n")
    elif case == "latin-1":
        tsv.write_bytes("sentence\tlabel\ncaf\u00e9 cr\u00e8me\t1\n".encode("latin-1"))
    elif case.startswith("a field over"):
        n = 200_000 if "Python" in case else MAX_FIELD + 1
        tsv.write_text(f"src\t1\t\tfirst.\nsrc\t0\t*\t{'word ' * (n // 5 + 1)}\n")
    elif case == "a folder":
        tsv.mkdir()
    elif case == "a FIFO":
        os.mkfifo(tsv)
    else:
        tsv.symlink_to(case)
    if case == "a field over Python's csv limit":
        examples = read_glue(tmp_path, task, "train")
        assert len(examples) == 2 and len(examples[1].a) >= 199_995
        return
    with pytest.raises(DataError) as info:
        read_glue(tmp_path, task, "train")
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(tsv)), message
    if case == "a field over vspec's limit":
        assert message.startswith(f"{tsv}:2: ")


def test_text_datasets_reads_a_long_review_truncated(tmp_path):
    """A field past the csv module's default limit trains: it is encoded and truncated to max_len."""
    folder = tmp_path / "cola"
    folder.mkdir()
    rows = [f"s\t{i % 2}\t\tthe film was {'good' if i % 2 else 'bad'} and {'very ' * (30_000 if i == 0 else 2)}long\n"
            for i in range(8)]
    (folder / "train.tsv").write_text("".join(rows))
    (folder / "dev.tsv").write_text("".join(rows[1:]))
    data = text_datasets("glue", task="cola", data_dir=str(folder), tokenizer=None, max_len=16, vocab_size=200,
                         out=tmp_path / "out")
    assert len(data.train) == 8 and max(len(ids) for ids, _, _ in data.train.items) == 16
