"""The text tasks' metrics, as GLUE defines them: accuracy; Matthews correlation (CoLA); F1 of the positive class
(MRPC, QQP); Pearson and Spearman correlation (STS-B, a regression on 0-5 scores); rt-polarity's and a data set's
own classes' accuracy, its own scores' correlations (`task_of`, vspec/train/text/readers.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...extras import needs
from .readers import Task, task_of

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = ["glue_metrics", "headline", "text_metrics"]


def glue_metrics(task: str | Task, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The task's metrics as GLUE reports them: predictions are class indices (or scores for a regression).

    Args:
        task: a GLUE task's name, rt-polarity, or a data set's own `Task`.
        predictions: the predictions (N,).
        labels: the labels (N,)."""
    spec = task_of(task)
    if spec.labels is None:
        with needs("GLUE's metrics"):
            from scipy.stats import pearsonr, spearmanr  # extra

        return {"pearson": float(pearsonr(predictions, labels)[0]),
                "spearman": float(spearmanr(predictions, labels)[0])}
    out = {"accuracy": float((predictions == labels).mean())}
    if spec.metric in ("matthews", "f1"):
        with needs("GLUE's metrics"):
            from sklearn.metrics import f1_score, matthews_corrcoef  # extra

        out[spec.metric] = float(matthews_corrcoef(labels, predictions) if spec.metric == "matthews"
                                 else f1_score(labels, predictions))
    return out


def text_metrics(task: str | Task, logits: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    """The task's metrics on a split's logits (N, C) (N, 1 for a regression) and targets.

    Args:
        task: a GLUE task's name, rt-polarity, or a data set's own `Task`.
        logits: the model's outputs.
        target: the labels (N,)."""
    if task_of(task).labels is None:
        return glue_metrics(task, logits[:, 0].double().numpy(), target.double().numpy())
    return glue_metrics(task, logits.argmax(1).numpy(), target.numpy())


def headline(task: str | Task) -> str:
    """The metric a run keeps its best checkpoint by.

    Args:
        task: a GLUE task's name, rt-polarity, or a data set's own `Task`."""
    return task_of(task).metric
