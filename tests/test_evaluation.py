"""Nearest-rank percentiles and fit accuracy (matchopt.evaluation)."""

import numpy as np

from matchopt.evaluation import fit_accuracy, percentile


def test_nearest_rank_percentiles():
    values = np.arange(1, 129) / 128
    assert percentile(values, 100) == 1.0
    assert percentile(values, 50) == np.percentile(values, 50, method="nearest")
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) in (2.0, 3.0)


def test_fit_accuracy_hand_computed():
    truth = np.array([1.0, 2.0, 3.0, 4.0])
    assert fit_accuracy(truth, truth) == {"r2": 1.0, "spearman": 1.0}
    # Residuals 1, 0, 0, -1 against a spread of 5: R^2 = 1 - 2/5; the ranks of 2, 2, 3, 3
    # tie in pairs (Spearman 0.894...), and a reversed order has Spearman -1.
    measured = fit_accuracy(truth, [2.0, 2.0, 3.0, 3.0])
    assert measured["r2"] == 0.6
    assert np.isclose(measured["spearman"], 2 / np.sqrt(5))
    assert fit_accuracy(truth, truth[::-1])["spearman"] == -1.0
