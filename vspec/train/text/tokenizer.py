"""Tokenisation for the text data: a tokenizer from a local folder (`Tokenizer`: the `tokenizers` library's
tokenizer.json, or a Hugging Face tokenizer's files; no download), or a WordPiece vocabulary trained here
(`train_wordpiece`, learned by vspec/train/text/wordpiece.py); the checks that it fits the text; its identity (the
sha256 of its files) that a run's checkpoints keep and `vspec eval` compares."""

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from ...extras import needs
from ...spec.errors import cause
from ..data.registry import DataError
from .readers import Example
from .wordpiece import learn, word_counts

__all__ = ["MAX_TOKENIZER_FILE", "MAX_UNKNOWN", "SAMPLE", "SPECIAL", "TOKENIZER_SUFFIXES", "Tokenizer",
           "check_tokenizer", "tokenizer_identity", "tokenizer_mismatch", "train_wordpiece"]

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # the WordPiece vocabulary's first entries, BERT's order
# the tokenizer_config.json beside a trained tokenizer.json (less model_max_length): transformers' AutoTokenizer
# loads the folder complete, its special tokens set (padding works) and BERT's inputs (token types) returned
_HF_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "model_input_names": ["input_ids", "token_type_ids",
             "attention_mask"], "padding_side": "right",
             **{f"{role}_token": token for role, token in zip(("pad", "unk", "cls", "sep", "mask"), SPECIAL)}}


class Tokenizer:
    """A tokenizer from a local folder: `tokenizer.json` (the `tokenizers` library's file, which
    `train_wordpiece` writes) or a Hugging Face checkpoint's (`AutoTokenizer.from_pretrained(folder)`, no
    download). `encode(a, b, max_len)` -> (input_ids, token_type_ids), truncated to max_len; `pad_id`, `unk_id`.
    A file either library cannot read is one DataError naming the folder."""

    def __init__(self, folder: str | Path):
        folder = Path(folder)
        self.folder = folder
        _check_files(folder)
        if (folder / "tokenizer.json").is_file() and _own_config(folder / "tokenizer_config.json"):
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
        """The vocabulary's size (the embedding's rows a text body needs)."""
        return self._fast.get_vocab_size() if self._fast is not None else len(self._hf)

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """The token strings of `ids` (tick labels).

        Args:
            ids: the token ids."""
        if self._fast is not None:
            return [self._fast.id_to_token(i) or "?" for i in ids]
        return self._hf.convert_ids_to_tokens(list(ids))

    def encode(self, a: str, b: str | None, max_len: int) -> tuple[list[int], list[int]]:
        """A text or a pair with the special tokens (BERT's: [CLS] a [SEP] b [SEP]), truncated to `max_len` tokens.

        Args:
            a: the text (a pair's first).
            b: a pair's second text, or None.
            max_len: the most tokens, special ones included.

        Returns:
            (the token ids, their token type ids)."""
        if self._fast is not None:
            self._fast.enable_truncation(max_len)
            enc = self._fast.encode(a, b) if b is not None else self._fast.encode(a)
            return enc.ids, enc.type_ids
        enc = self._hf(a, b, truncation=True, max_length=max_len)
        return enc["input_ids"], enc.get("token_type_ids") or [0] * len(enc["input_ids"])


# what a tokenizer reads from its folder (a Hugging Face checkpoint folder also holds weights: neither read nor hashed)
TOKENIZER_SUFFIXES = (".json", ".txt", ".model")
MAX_TOKENIZER_FILE = 2**30  # bytes; the largest published tokenizer.json is tens of MB


def _own_config(path: Path) -> bool:
    """Whether a tokenizer.json's folder is read by the `tokenizers` library alone: no tokenizer_config.json beside
    it, or the one `train_wordpiece` writes (a Hugging Face checkpoint's goes through transformers)."""
    if not path.exists():
        return True
    try:
        config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return False  # transformers' reader says what is wrong with it
    return isinstance(config, dict) and {k: v for k, v in config.items() if k != "model_max_length"} == _HF_CONFIG


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
    SAMPLE training examples mapped to the unknown token.

    Args:
        tok: the tokenizer.
        examples: the training examples."""
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
    """The tokenizer in `folder`, identified: the sha256 of each of its files (.json, .txt, .model), by name.

    Args:
        folder: the tokenizer's folder."""
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
    """How the tokenizer in `folder` differs from the one `saved` identifies (`tokenizer_identity`), or None.

    Args:
        saved: the identity a checkpoint saved.
        folder: the tokenizer's folder now."""
    if not Path(folder).is_dir():
        return f"{folder} is missing: the run was trained with the tokenizer that was there"
    now = tokenizer_identity(folder)
    changes = [f"{name} {'changed' if name in now else 'missing'}" for name in saved if now.get(name) != saved[name]]
    changes += [f"{name} added" for name in now if name not in saved]
    if not changes:
        return None
    shown = ", ".join(changes[:4]) + (f" and {len(changes) - 4} more" if len(changes) > 4 else "")
    return f"{folder} is not the tokenizer the run was trained with ({shown})"


def train_wordpiece(texts: Sequence[str], folder: str | Path, vocab_size: int = 8000,
                    max_len: int | None = None, token_types: bool = True) -> Tokenizer:
    """A lower-cased WordPiece vocabulary (BERT's normaliser and pre-tokeniser, special tokens [PAD] = 0, [UNK],
    [CLS], [SEP], [MASK]) learned from `texts` (vspec/train/text/wordpiece.py: the same file on every run), with BERT's
    templates ([CLS] a [SEP] (b [SEP])), saved as `folder/tokenizer.json` with the `tokenizer_config.json` that
    transformers' `AutoTokenizer.from_pretrained(folder)` reads its special tokens from (`_HF_CONFIG`; `max_len`: its
    model_max_length, the length truncation cuts to; `token_types`: whether it returns token_type_ids, which a body
    without token types, GPT's, refuses); returns it loaded.

    Args:
        texts: the training texts.
        folder: where the tokenizer is saved.
        vocab_size: the vocabulary's most entries.
        max_len: model_max_length, or None.
        token_types: whether it returns token_type_ids."""
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
    config = {**_HF_CONFIG, **({} if max_len is None else {"model_max_length": max_len})}
    if not token_types:
        config["model_input_names"] = [n for n in _HF_CONFIG["model_input_names"] if n != "token_type_ids"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    tok.save(str(folder / "tokenizer.json"))  # last: a run reuses a folder that holds it
    return Tokenizer(folder)
