"""Statistical checks for random draws compared with a reference's: a two-sample Kolmogorov-Smirnov test at a stated
false-alarm rate, and frequencies within a number of standard deviations. The tests seed every generator, so each
check gives the same verdict every run; the stated rates say how unlikely a correct sampler is to fail at a seed."""

import math

import numpy as np

ALPHA = 1e-4  # each KS check's false-alarm rate for a correct sampler (continuous laws; below it for discrete ones)
SIGMAS = 5.0  # each frequency check's bound: a correct sampler fails with probability ~6e-7 (normal approximation)


def ks_statistic(a, b) -> float:
    """The largest distance between the two samples' empirical distribution functions (ties counted as numpy's
    searchsorted 'right' does, so discrete samples are measured correctly)."""
    a, b = np.sort(np.asarray(a, dtype=np.float64)), np.sort(np.asarray(b, dtype=np.float64))
    points = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, points, side="right") / len(a)
    cdf_b = np.searchsorted(b, points, side="right") / len(b)
    return float(np.abs(cdf_a - cdf_b).max())


def ks_critical(n: int, m: int, alpha: float = ALPHA) -> float:
    """The asymptotic two-sample critical value: sqrt(-ln(alpha / 2) / 2) * sqrt((n + m) / (n m)) (conservative
    where the law is discrete)."""
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))


def assert_same_law(ours, reference, what: str, alpha: float = ALPHA) -> None:
    ours, reference = np.asarray(ours), np.asarray(reference)
    assert len(ours) > 100 and len(reference) > 100, f"{what}: too few draws ({len(ours)}, {len(reference)})"
    d, crit = ks_statistic(ours, reference), ks_critical(len(ours), len(reference), alpha)
    assert d < crit, f"{what}: KS distance {d:.4f} >= {crit:.4f} (alpha {alpha}; n {len(ours)}, {len(reference)})"


def assert_rate(hits: int, n: int, p: float, what: str, sigmas: float = SIGMAS) -> None:
    """hits of n draws agree with the probability p."""
    sd = math.sqrt(max(p * (1 - p), 1e-12) / n)
    assert abs(hits / n - p) <= sigmas * sd, f"{what}: rate {hits / n:.4f}, expected {p:.4f} +- {sigmas} x {sd:.4f}"


def assert_same_rate(hits: int, n: int, ref_hits: int, ref_n: int, what: str, sigmas: float = SIGMAS) -> None:
    """Two observed frequencies agree (the pooled standard deviation of their difference)."""
    pooled = (hits + ref_hits) / (n + ref_n)
    sd = math.sqrt(max(pooled * (1 - pooled), 1e-12) * (1 / n + 1 / ref_n))
    a, b = hits / n, ref_hits / ref_n
    assert abs(a - b) <= sigmas * sd, f"{what}: rate {a:.4f}, reference {b:.4f} (+- {sigmas} x {sd:.4f})"
