"""What `vspec compare` reports of its runs (vspec/compare.py): each spec's spread over the seeds, Welch's test of
the best spec against each other (is it told apart from the seed noise?), the markdown table and the plot, all read
from compare.json's content."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["ALPHA", "METRICS", "noise", "plot", "spread", "table", "welch"]
ALPHA = 0.05  # Welch's test: a difference with p below it is told apart from the seed noise
METRICS = {"val_top1": "val top-1 (%)"}  # the others are named by the task's metric: val accuracy, val mcc, ...


def spread(values: Sequence[float]) -> dict[str, float]:
    """mean, sample standard deviation (0 for one value), min and max.

    Args:
        values: the per-seed values (at least one).
    """
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "std": std, "min": min(values), "max": max(values)}


def welch(a: Sequence[float], b: Sequence[float]) -> dict[str, float] | None:
    """Welch's t-test of mean(a) - mean(b) (unequal variances; scipy's `ttest_ind(equal_var=False)`): t, the
    Welch-Satterthwaite degrees of freedom and the two-sided p-value; None with fewer than two values on a side.
    Equal values on both sides (no variance, where scipy's t is 0 / 0): p = 1 if the means are equal, else 0.

    Args:
        a: one spec's per-seed values.
        b: the other's.
    """
    from scipy.stats import ttest_ind  # extra

    if len(a) < 2 or len(b) < 2:
        return None
    if statistics.variance(a) == statistics.variance(b) == 0:
        diff = statistics.fmean(a) - statistics.fmean(b)
        return {"t": None if diff else 0.0, "df": float(len(a) + len(b) - 2), "p": 0.0 if diff else 1.0}
    test = ttest_ind(a, b, equal_var=False)
    return {"t": float(test.statistic), "df": float(test.df), "p": float(test.pvalue)}


def _metric(result: dict[str, Any]) -> str:
    """The record key compared (a comparison written before it was kept there compared val_top1)."""
    metric = result.get("metric", "")
    return metric if metric.startswith("val_") else "val_top1"


def _scores(row: dict[str, Any], metric: str) -> list[float]:
    """A row's per-seed values (a comparison written before they were kept: read from its runs)."""
    return row.get("scores") or [r[metric] for r in row["runs"]]


def noise(result: dict[str, Any]) -> dict[str, dict[str, float] | None]:
    """Per spec, Welch's test of the best spec against it (None: the best itself, or a single seed).

    Args:
        result: compare.json's content.
    """
    metric = _metric(result)
    rows = result["specs"]
    best = max(rows, key=lambda r: statistics.fmean(_scores(r, metric)))
    return {r["name"]: None if r is best else welch(_scores(best, metric), _scores(r, metric)) for r in rows}


def table(result: dict[str, Any]) -> str:
    """The comparison as a markdown table (from compare.json's content): the token labels and the precision where
    the rows differ in them, counts (the originals beside them when the specs were matched to a budget), samples/s,
    the metric's mean, std and min-max over the seeds, and the noise column: Welch's p against the best spec.

    Args:
        result: compare.json's content.
    """
    metric = _metric(result)
    name = result.get("metric_name", METRICS.get(metric, metric))
    digits = 2 if metric == "val_top1" else 4
    matched = result.get("match")
    tests = noise(result)
    labels = any("token_labels" in r for r in result["specs"])
    by_precision = len({r.get("precision") for r in result["specs"]}) > 1
    head = ["spec", *(["token labels"] if labels else []), *(["precision"] if by_precision else []), "params", "MACs",
            *(["matched from (params, MACs)", "fitted"] if matched else []), "samples/s",
            f"{name}, mean", "std", "min-max", f"vs the best: Welch's p (< {ALPHA}: distinguishable)"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in result["specs"]:
        values = _scores(r, metric)
        t = r.get("score") or r["top1"]
        test = tests[r["name"]]
        verdict = ("- (one seed)" if len(values) < 2 else "best") if test is None else \
            f"{test['p']:.3f}" + (" distinguishable" if test["p"] < ALPHA else " within noise")
        m = r.get("matched")
        extra = [f"{m['params']:,}, {m['macs'] / 1e6:.2f} M", ", ".join(f"{k}={v}" for k, v in m["fitted"].items())
                 or "the reference"] if matched else []
        rate = r.get("samples_per_s", r.get("images_per_s"))
        tl = ["yes" if r.get("token_labels") else "no"] if labels else []
        tl += [r["precision"]] if by_precision else []
        lines.append("| " + " | ".join([r["name"], *tl, f"{r['params']:,}", f"{r['macs'] / 1e6:.2f} M", *extra,
                                        f"{rate:,.0f}", f"{t['mean']:.{digits}f}", f"{t['std']:.{digits}f}",
                                        f"{t['min']:.{digits}f}-{t['max']:.{digits}f}", verdict]) + " |")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """The metric's mean against MACs, one labelled point per spec, its min-max as the error bar; filled where the
    spec is the best or told apart from it (Welch's p < ALPHA), hollow where it is within the seed noise.

    Args:
        result: compare.json's content.
        path: the image written (.png).
    """
    from .analysis import pyplot  # torch

    plt = pyplot()
    metric = _metric(result)
    tests = noise(result)
    best = max(result["specs"], key=lambda r: statistics.fmean(_scores(r, metric)))["name"]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for r in result["specs"]:
        t, x, test = r.get("score") or r["top1"], r["macs"] / 1e6, tests[r["name"]]
        hollow = test is not None and test["p"] >= ALPHA
        ax.errorbar([x], [t["mean"]], yerr=[[t["mean"] - t["min"]], [t["max"] - t["mean"]]], fmt="o", capsize=4,
                    mfc="none" if hollow else None)
        label = r["name"] + (" (best)" if test is None and r["name"] == best else "")
        ax.annotate(label, (x, t["mean"]), textcoords="offset points", xytext=(6, 6), fontsize=9)
    d = result["data"]
    ax.set(xlabel="MACs per sample (M)", ylabel=result.get("metric_name", METRICS.get(metric, metric)),
           title=f"{d.get('task', d['name'])} ({d['train']:,} / {d['val']:,}), {result['recipe']['epochs']} epochs, "
                 f"seeds {', '.join(map(str, result['seeds']))}")
    ax.grid(alpha=0.3)
    ax.margins(x=0.3, y=0.1)
    if len(result["seeds"]) > 1:
        ax.text(0.01, 0.01, f"hollow: within the seed noise of the best (Welch's p >= {ALPHA})",
                transform=ax.transAxes, fontsize=8, alpha=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
