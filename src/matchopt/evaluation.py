"""Scoring a run: nearest-rank percentiles of normalized scores, and the lab view of a design set.

Ranks and the mean normalized rank (MNR) of the paper's tables live with the tables, in
:mod:`matchopt.report`; records in :mod:`matchopt.records`.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def percentile(values: np.ndarray, q: float) -> float:
    """Nearest-rank percentile (numpy ``method="nearest"``, as design-baselines reports)."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="nearest"))


def _row_keys(x: np.ndarray) -> list[bytes]:
    """One hashable key per row (its bytes; rows compared in one dtype)."""
    flat = np.ascontiguousarray(np.asarray(x).reshape(len(x), -1))
    return [row.tobytes() for row in flat]


def lab_view(
    designs: np.ndarray,
    scores: np.ndarray,
    offline_x: np.ndarray,
    measured: np.ndarray | None = None,
) -> dict[str, Any]:
    """What a lab would test of a design set: the distinct designs it has not measured.

    The protocol's p100 and p50 count every returned design, copies and offline rows included;
    a lab tests each distinct new design once. Returns ``distinct`` (distinct designs),
    ``offline_repeats`` (returned designs equal to an offline row, copies counted),
    ``unmeasured`` (designs the task's oracle never measured, copies counted; scored as its
    minimum), ``new`` (distinct designs not in the offline set) and ``p100`` / ``p50`` over those
    new designs' normalized scores (``None`` when there are none).

    Args:
        designs: returned designs (n x shape), in the offline rows' dtype.
        scores: their normalized scores (n,).
        offline_x: the offline designs the method was given.
        measured: True where the oracle measured the design (tasks whose oracle is a table with
            gaps); ``None``: every design is measured.
    """
    designs = np.asarray(designs, dtype=np.asarray(offline_x).dtype)
    scores = np.asarray(scores, dtype=np.float64)
    keys = _row_keys(designs)
    offline = set(_row_keys(offline_x))
    first: dict[bytes, int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    new = [i for key, i in first.items() if key not in offline]
    new_scores = scores[new]
    return {
        "distinct": len(first),
        "offline_repeats": sum(key in offline for key in keys),
        "unmeasured": 0 if measured is None else int(np.sum(~np.asarray(measured, dtype=bool))),
        "new": len(new),
        "p100": percentile(new_scores, 100) if len(new) else None,
        "p50": percentile(new_scores, 50) if len(new) else None,
    }


def fit_accuracy(truth: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """R^2 and Spearman's rank correlation of predictions (n,) against measured values (n,):
    how every fitted oracle states its held-out accuracy, so the tasks' numbers compare."""
    from scipy.stats import spearmanr

    truth = np.asarray(truth, dtype=np.float64)
    predicted = np.asarray(predicted, dtype=np.float64)
    r2 = 1.0 - np.sum((truth - predicted) ** 2) / np.sum((truth - truth.mean()) ** 2)
    return {"r2": float(r2), "spearman": float(spearmanr(truth, predicted)[0])}
