"""Scoring a run: nearest-rank percentiles of normalized scores.

Ranks and the mean normalized rank (MNR) of the paper's tables live with the tables, in
:mod:`matchopt.report`; records in :mod:`matchopt.records`.
"""

from __future__ import annotations

import numpy as np


def percentile(values: np.ndarray, q: float) -> float:
    """Nearest-rank percentile (numpy ``method="nearest"``, as design-baselines reports)."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="nearest"))


def fit_accuracy(truth: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """R^2 and Spearman's rank correlation of predictions (n,) against measured values (n,):
    how every fitted oracle states its held-out accuracy, so the tasks' numbers compare."""
    from scipy.stats import spearmanr

    truth = np.asarray(truth, dtype=np.float64)
    predicted = np.asarray(predicted, dtype=np.float64)
    r2 = 1.0 - np.sum((truth - predicted) ** 2) / np.sum((truth - truth.mean()) ** 2)
    return {"r2": float(r2), "spearman": float(spearmanr(truth, predicted)[0])}
