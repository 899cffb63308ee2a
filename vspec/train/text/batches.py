"""What a text run reads: the examples of its data set tokenised once (`TextDataset`, `text_datasets`: the
tokenizer given, or a WordPiece vocabulary trained into the run's folder) and batches padded to their longest
sequence (`pad_batch`)."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import Dataset

from ..data.registry import DataError, Request, entry
from ..data.registry import names as dataset_names
from . import run_tokenizer
from .readers import Example, Task, task_of
from .tokenizer import Tokenizer, check_tokenizer, train_wordpiece

__all__ = ["TextData", "TextDataset", "pad_batch", "text_datasets", "token_types"]


class TextDataset(Dataset):
    """Examples tokenised once: item i is (input_ids, token_type_ids, label)."""

    def __init__(self, examples: Sequence[Example], tokenizer: Tokenizer, max_len: int):
        self.items = [(*tokenizer.encode(e.a, e.b, max_len), e.label) for e in examples]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.items[i]


def token_types(spec) -> bool:
    """Whether the model of `spec` takes token_type_ids: its embedder has token types (BERT's; GPT's has none).

    Args:
        spec: the model's spec."""
    return bool(getattr(spec.embedder, "type_vocab_size", 0))


def pad_batch(pad_id: int, token_types: bool = True) -> Callable[[list], tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """A collate function: the batch padded on the right to its longest sequence (dynamic padding) ->
    ({input_ids, attention_mask[, token_type_ids]}, labels: int64, or float32 for a regression). `token_types`:
    whether the model takes token_type_ids (a body without token types, GPT's, refuses them).

    Args:
        pad_id: the tokenizer's [PAD] id.
        token_types: whether the batch holds token_type_ids."""

    def collate(items: list) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        n = max(len(ids) for ids, _, _ in items)
        ids = torch.full((len(items), n), pad_id, dtype=torch.long)
        types = torch.zeros((len(items), n), dtype=torch.long)
        mask = torch.zeros((len(items), n), dtype=torch.long)
        for i, (x, t, _) in enumerate(items):
            ids[i, :len(x)], types[i, :len(t)], mask[i, :len(x)] = torch.tensor(x), torch.tensor(t), 1
        labels = [y for _, _, y in items]
        dtype = torch.float32 if isinstance(labels[0], float) else torch.long
        inputs = {"input_ids": ids, "attention_mask": mask, **({"token_type_ids": types} if token_types else {})}
        return inputs, torch.tensor(labels, dtype=dtype)

    return collate


@dataclass
class TextData:
    """A run's text data: the splits, the class count (1: a regression), the padding id, the metrics' task."""

    train: TextDataset
    val: TextDataset
    num_classes: int
    pad_id: int
    task: str | Task  # a GLUE task, rt-polarity (accuracy), or a data set's own (vspec/train/text/readers.py's task_of)
    tokenizer: Path  # the folder of the tokenizer that encoded them


def text_datasets(data: str, *, task: str | None, data_dir: str | None, tokenizer: str | None, max_len: int,
                  vocab_size: int, out: Path, token_types: bool = True, **options) -> TextData:
    """The text data set `data` (its entry's loader: rt-polarity, a GLUE task `task` from `data_dir`, a Hugging Face
    dataset), tokenised by the tokenizer folder `tokenizer`; without one, a WordPiece vocabulary of up to
    `vocab_size` words trained on the training texts and kept in `run_tokenizer(out)` (reused when it is there: a
    resumed run). `token_types`: whether the model takes token_type_ids (a trained tokenizer returns them then,
    `train_wordpiece`); `options`: the data set's other options, `Request`'s fields (`registry.options`: the split
    validated on, a Hugging Face dataset's configuration and columns).

    Args:
        data: the data set's name (--data).
        task: --task, or None.
        data_dir: --data-dir, or None.
        tokenizer: a tokenizer folder, or None to train one.
        max_len: the most tokens of an example.
        vocab_size: the trained vocabulary's most words.
        out: the run's folder.
        token_types: whether the model takes token_type_ids.
        **options: the data set's other options."""
    text_sets = dataset_names("text")
    if data not in text_sets:
        raise DataError(f"--data {data!r}: a text body trains on {' or '.join(text_sets)}")
    train, val, task = entry(data).load("text")(Request(data_dir=data_dir, task=task, **options))
    own = run_tokenizer(out)
    if tokenizer is not None:
        tok = Tokenizer(tokenizer)
    elif (own / "tokenizer.json").is_file():
        tok = Tokenizer(own)
    else:
        texts = [t for e in train for t in (e.a, e.b) if t]
        tok = train_wordpiece(texts, own, vocab_size=vocab_size, max_len=max_len, token_types=token_types)
    if tok.vocab_size > vocab_size:
        raise DataError(f"the tokenizer's {tok.vocab_size} tokens do not fit the spec's embedder.vocab_size "
                        f"{vocab_size}")
    check_tokenizer(tok, train)
    labels = task_of(task).labels
    return TextData(TextDataset(train, tok, max_len), TextDataset(val, tok, max_len),
                    1 if labels is None else len(labels), tok.pad_id, task, tok.folder)
