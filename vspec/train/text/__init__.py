"""Text data for fine-tuning language bodies: the data sets' files read as examples (`readers.py`: the GLUE tasks,
rt-polarity), tokenisation (`tokenizer.py`; `wordpiece.py`, the vocabulary learned the same on every run), what a
run reads (`batches.py`: the examples tokenised once, batches padded to their longest) and the tasks' metrics
(`metrics.py`).

Here, torch-free: the GLUE tasks' names (the commands' --help lists them without importing torch or an extra; a
test keeps them equal to `readers.GLUE`'s) and where a run keeps the tokenizer it trained (`run_tokenizer`)."""

from pathlib import Path

from ..._moved import moved as _moved

__all__ = ["GLUE_TASKS", "run_tokenizer"]

GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")


def run_tokenizer(out: str | Path) -> Path:
    """The tokenizer a text run without --tokenizer trains and keeps: OUT/tokenizer (a resume reuses it, `vspec
    eval` of OUT/*.pt reads it).

    Args:
        out: the run's folder."""
    return Path(out) / "tokenizer"


def __getattr__(name: str):  # the names of the module this package was (vspec/_moved.py)
    return _moved(__name__, name)
