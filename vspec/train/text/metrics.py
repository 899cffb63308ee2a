"""The text tasks' metrics, as GLUE defines them: accuracy; Matthews correlation (CoLA); F1 of the positive class
(MRPC, QQP); Pearson and Spearman correlation (STS-B, a regression on 0-5 scores); rt-polarity's accuracy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...extras import needs
from .readers import GLUE

if TYPE_CHECKING:
    import numpy as np
    import torch


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
