"""A tiny WordPiece tokenizer (transformers' `BertTokenizerFast` over a vocabulary written here), a labelled data set
of its sentences, and the presets shrunk to its vocabulary, for the tests that drive Hugging Face's tools."""

from pathlib import Path

import torch

import vspec

WORDS = ("good great fine witty fun moving bad awful dull boring sad flat film movie plot acting cast story the a "
         "very not").split()
POSITIVE = {"good", "great", "fine", "witty", "fun", "moving"}
SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SHRINK = {"depth": 2, "dim": 32, "block.attention.heads": 4, "block.ffn.hidden": 64, "embedder.vocab_size":
          len(SPECIAL) + len(WORDS), "embedder.max_positions": 32, "embedder.seq_len": 16}


def tokenizer(folder: Path, types: bool = True):
    """A BERT tokenizer (lower case, [CLS] ... [SEP], pad id 0) of `WORDS`, saved in `folder`; `types=False` gives
    no token_type_ids (a GPT body has none)."""
    from transformers import BertTokenizerFast  # extra: vspec[text]

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join([*SPECIAL, *WORDS]) + "\n")
    names = ["input_ids", "token_type_ids", "attention_mask"] if types else ["input_ids", "attention_mask"]
    tok = BertTokenizerFast(str(folder / "vocab.txt"), model_input_names=names)
    tok.save_pretrained(folder)
    return tok


def sentences(n: int, seed: int = 0) -> list[tuple[str, int]]:
    """`n` (sentence, label) pairs of 2 to 9 words: label 1 where more than a third of the words are positive."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        k = int(torch.randint(2, 10, (1,), generator=g))
        words = [WORDS[int(i)] for i in torch.randint(0, len(WORDS), (k,), generator=g)]
        out.append((" ".join(words), int(sum(w in POSITIVE for w in words) * 3 > k)))
    return out


def rows(tok, n: int, seed: int = 0) -> list[dict]:
    """The tokenised data set Trainer takes: a dict of input_ids (and the rest the tokenizer gives) and labels."""
    return [{**tok(text), "labels": label} for text, label in sentences(n, seed)]


def small_text(name: str, **overrides) -> vspec.Model:
    """Preset `name` shrunk to two blocks of 32 and the tokenizer's vocabulary (`SHRINK`), then `overrides`."""
    return vspec.override(vspec.load_spec(name), {**SHRINK, **overrides})
