"""Scoring a run: nearest-rank percentiles of normalized scores.

Ranks and the mean normalized rank (MNR) of the paper's tables live with the tables, in
:mod:`matchopt.report`; records in :mod:`matchopt.records`.
"""

from __future__ import annotations

import numpy as np


def percentile(values: np.ndarray, q: float) -> float:
    """Nearest-rank percentile (numpy ``method="nearest"``, as design-baselines reports)."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="nearest"))
