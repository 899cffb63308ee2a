"""Torch-free names of the text data: the GLUE tasks (the commands' --help lists them without importing torch or an
extra; vspec/train/text.py holds the readers, and a test keeps the names equal to theirs) and where a run keeps the
tokenizer it trained."""

from pathlib import Path

GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")


def run_tokenizer(out: str | Path) -> Path:
    """The tokenizer a text run without --tokenizer trains and keeps: OUT/tokenizer (a resume reuses it, `vspec
    eval` of OUT/*.pt reads it)."""
    return Path(out) / "tokenizer"
