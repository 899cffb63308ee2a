"""A WordPiece vocabulary learned the way `tokenizers`' WordPieceTrainer learns one (byte-pair merges over the
pre-tokenised words, continuation pieces marked `##`), but the same vocabulary, in the same order, on every run.

`tokenizers` 0.23's trainer numbers the `##` pieces in hash-map order, and its merges break count ties by those
numbers: two runs on the same texts give vocabularies that differ in ids and even in members
(huggingface/tokenizers#1794). Here every order is stated: words are counted in the texts' order, the alphabet and
the `##` pieces are sorted, and among pairs of equal count the first in string order merges first. Only the
learning is done here; encoding is `tokenizers`' own (greedy longest match)."""

import heapq
from collections import Counter
from collections.abc import Iterable, Sequence

__all__ = ["PREFIX", "learn", "word_counts"]

PREFIX = "##"  # marks a piece that continues a word


def word_counts(texts: Iterable[str], normalize, pre_tokenize) -> dict[str, int]:
    """How often each pre-tokenised word occurs, in order of first occurrence.

    Args:
        texts: the training texts.
        normalize: str -> str (the tokenizer's normalizer, e.g. BERT's lower-casing).
        pre_tokenize: str -> [(word, offsets), ...] (the tokenizer's pre-tokenizer)."""
    counts: dict[str, int] = {}
    for text in texts:
        for word, _ in pre_tokenize(normalize(text)):
            counts[word] = counts.get(word, 0) + 1
    return counts


def learn(counts: dict[str, int], vocab_size: int, special: Sequence[str]) -> list[str]:
    """The vocabulary, in id order: `special`, every character of the words and, `##`-marked, every character
    that continues a word (by frequency, then string order, as many as fit), then one piece per merge until
    `vocab_size` entries: the most frequent adjacent pair of pieces (ties: the smaller pair in string order)
    becomes one piece in every word (a + b without b's `##`).

    Args:
        counts: each word's count, in the order `word_counts` gives.
        vocab_size: the vocabulary's most entries (fewer when the merges run out).
        special: the special tokens, first in the vocabulary."""
    vocab = _alphabet(counts, vocab_size, special)
    known = set(vocab)
    # every word as its pieces; a word with a character that did not fit stays [UNK] and teaches nothing
    words = [[w[0], *(PREFIX + c for c in w[1:])] for w in counts]
    freq = list(counts.values())
    usable = [i for i, pieces in enumerate(words) if all(p in known for p in pieces)]
    pairs: Counter[tuple[str, str]] = Counter()
    where: dict[tuple[str, str], set[int]] = {}
    for i in usable:
        for pair in zip(words[i], words[i][1:]):
            pairs[pair] += freq[i]
            where.setdefault(pair, set()).add(i)
    heap = [(-n, a, b) for (a, b), n in pairs.items()]
    heapq.heapify(heap)
    while len(vocab) < vocab_size and heap:
        n, a, b = heapq.heappop(heap)
        if pairs.get((a, b)) != -n:  # a stale entry: the pair's count changed since it was pushed
            continue
        merged = a + b[len(PREFIX):]
        if merged not in known:
            vocab.append(merged)
            known.add(merged)
        changed: Counter[tuple[str, str]] = Counter()
        for i in sorted(where.pop((a, b))):
            old = words[i]
            for pair in zip(old, old[1:]):
                changed[pair] -= freq[i]
            words[i] = new = _merge(old, a, b, merged)
            for pair in zip(new, new[1:]):
                changed[pair] += freq[i]
                where.setdefault(pair, set()).add(i)
        for pair, delta in changed.items():
            if delta:
                pairs[pair] += delta
                if pairs[pair] > 0:
                    heapq.heappush(heap, (-pairs[pair], *pair))
                else:
                    del pairs[pair]
        pairs.pop((a, b), None)
    return vocab


def _alphabet(counts: dict[str, int], vocab_size: int, special: Sequence[str]) -> list[str]:
    """`special`, then the characters and `##` characters of the words (by frequency, then string order, as many
    as fit), sorted."""
    chars: Counter[str] = Counter()
    for word, n in counts.items():
        for i, c in enumerate(word):
            chars[c] += n
            if i:
                chars[PREFIX + c] += n
    vocab = list(dict.fromkeys(special))
    room = max(vocab_size - len(vocab), 0)
    alphabet = sorted(chars, key=lambda s: (-chars[s], s))[:room]
    return vocab + sorted(set(alphabet) - set(vocab))


def _merge(pieces: list[str], a: str, b: str, merged: str) -> list[str]:
    """`pieces` with each adjacent (a, b), left to right, replaced by `merged`."""
    new, j = [], 0
    while j < len(pieces):
        if j + 1 < len(pieces) and pieces[j] == a and pieces[j + 1] == b:
            new.append(merged)
            j += 2
        else:
            new.append(pieces[j])
            j += 1
    return new
