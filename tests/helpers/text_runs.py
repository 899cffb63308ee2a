"""Text training runs from the command line: a GLUE-format folder written here (CoLA-shaped), a tiny text spec,
the arguments, the records a run writes."""

import json
import random
from pathlib import Path

GOOD, BAD = ["good", "fine", "great", "lovely"], ["bad", "poor", "awful", "dull"]


def cola_folder(folder: Path, n_train: int = 64, n_dev: int = 32) -> Path:
    """CoLA's format (no header: source, label, original mark, sentence); label 1 when a GOOD word is in it."""
    rng = random.Random(0)
    folder.mkdir(parents=True)
    for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        rows = []
        for i in range(n):
            label = i % 2
            rows.append(f"src{i % 3}\t{label}\t{'' if label else '*'}\t{sentence(rng, GOOD if label else BAD)}\n")
        (folder / name).write_text("".join(rows))
    return folder


def args(spec, out, data_dir, task, *extra):
    return [str(spec), "--data", "glue", "--task", task, "--data-dir", str(data_dir), "--out", str(out),
            "--recipe", "glue", "--lr", "3e-3", "--batch-size", "16", "--device", "cpu", "--seed", "2", *extra]


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def sentence(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.sample(FILL, 4) + [rng.choice(words)] + rng.sample(FILL, 2)) + "."


FILL = ["the", "film", "was", "a", "story", "and", "it", "very", "really", "plot"]
