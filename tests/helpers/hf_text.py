"""GLUE-shaped rows written the two ways a user holds them: the TSV files of the GLUE distribution (the format
vspec/train/text/readers.py reads) and a Hugging Face DatasetDict as the Hub's GLUE (`nyu-mll/glue`) declares each
task: its column names and its ClassLabel names in its own class order (the facts below are the Hub dataset's
published features, written out here: MNLI's order differs from the TSV reader's, the digit-labelled tasks name
their classes). The same rows either way; tests/helpers/hf_data.py writes the DatasetDict to disk."""

import random

from tests.helpers.text_runs import BAD, GOOD, sentence

HUB = {  # task: (TSV header or None, TSV text columns, TSV label column, Hub columns, Hub ClassLabel names)
    "rte": (("index", "sentence1", "sentence2", "label"), ("sentence1", "sentence2"), "label",
            ("sentence1", "sentence2"), ("entailment", "not_entailment")),
    "mnli": (("index", "sentence1", "sentence2", "gold_label"), ("sentence1", "sentence2"), "gold_label",
             ("premise", "hypothesis"), ("entailment", "neutral", "contradiction")),
    "cola": (None, (3,), 1, ("sentence",), ("unacceptable", "acceptable")),
    "stsb": (("index", "sentence1", "sentence2", "score"), ("sentence1", "sentence2"), "score",
             ("sentence1", "sentence2"), None),
}
TSV_LABELS = {"rte": ("entailment", "not_entailment"), "mnli": ("contradiction", "entailment", "neutral"),
              "cola": ("0", "1")}  # the label strings of the TSV files
VAL = {"mnli": ("dev_matched.tsv", "validation_matched")}  # the TSV file and the Hub split validated on
MISMATCHED = ("dev_mismatched.tsv", "validation_mismatched")  # MNLI's other one: here its rows reversed


def rows(task: str, n: int, seed: int = 0) -> list[tuple]:
    """`n` rows of `task`: its texts (one or two) and its TSV label string (a score for STS-B); the label follows a
    word of the first text, so that a run learns."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if task == "stsb":
            label = f"{rng.uniform(0, 5):.3f}"
        else:
            label = TSV_LABELS[task][i % len(TSV_LABELS[task])]
        first = sentence(rng, GOOD if TSV_LABELS.get(task, "01")[0] == label else BAD)
        out.append((first, sentence(rng, GOOD + BAD), label) if len(HUB[task][1]) == 2 else (first, label))
    return out


def tsv_folder(folder, task: str, train: list[tuple], val: list[tuple]):
    """The rows as the task's GLUE folder: train.tsv and dev.tsv (MNLI's dev_matched.tsv), CoLA without header."""
    header, texts, label, _, _ = HUB[task]
    folder.mkdir(parents=True)
    files = [("train.tsv", train), (VAL.get(task, ("dev.tsv",))[0], val)]
    for name, part in files + ([(MISMATCHED[0], val[::-1])] if task == "mnli" else []):
        lines = ["\t".join(header)] if header else []
        for i, row in enumerate(part):
            if header:
                lines.append("\t".join((str(i), *row)))
            else:  # CoLA: source, label, original mark, sentence
                lines.append(f"src\t{row[-1]}\t\t{row[0]}")
        (folder / name).write_text("\n".join(lines) + "\n")
    return folder


def hub_dataset(task: str, train: list[tuple], val: list[tuple], test: int = 0):
    """The rows as the Hub's GLUE task: its columns, its ClassLabel (or float32 scores for STS-B: float64 here, so
    that a score is the TSV's number), an `idx`; and `test` unlabelled rows (label -1) as GLUE's test split."""
    import datasets

    _, _, _, columns, names = HUB[task]
    label = datasets.ClassLabel(names=list(names)) if names else datasets.Value("float64")
    features = datasets.Features({**{c: datasets.Value("string") for c in columns}, "label": label,
                                  "idx": datasets.Value("int32")})

    def hub_label(value: str):
        if names is None:
            return float(value)
        return int(value) if value.isdigit() else names.index(value)  # a digit is the class index (CoLA's files)

    def dataset(part, unlabelled=False):
        table = {c: [r[k] for r in part] for k, c in enumerate(columns)}
        table["label"] = [-1 if unlabelled else hub_label(r[-1]) for r in part]
        return datasets.Dataset.from_dict({**table, "idx": list(range(len(part)))}, features=features)

    splits = {"train": dataset(train), VAL.get(task, (None, "validation"))[1]: dataset(val)}
    if task == "mnli":
        splits[MISMATCHED[1]] = dataset(val[::-1])
    if test:
        splits["test"] = dataset(rows(task, test, seed=9), unlabelled=True)
    return datasets.DatasetDict(splits)
