import math

import numpy as np
import pytest

from matchopt.errors import MatchoptError
from matchopt.weighting import adaptive_temperature, score_bin_weights


def test_weights_on_a_hand_computed_case():
    # y = (0, 0, 1, 3), 3 bins: edges 0, 1, 2, 3; fractions p = (1/2, 1/4, 1/4) (the last bin
    # holds y = 3 and is closed on the right); upper edges (1, 2, 3), temperature 1.
    y = np.array([0.0, 0.0, 1.0, 3.0])
    z = math.exp(-2) + math.exp(-1) + 1.0
    softmax = [math.exp(-2) / z, math.exp(-1) / z, 1.0 / z]  # 0.0900, 0.2447, 0.6652
    p = [0.5, 0.25, 0.25]
    q = [s * f / (f + 1e-3) for s, f in zip(softmax, p)]
    q = [v / (sum(q) + 1e-7) for v in q]  # 0.0902, 0.2447, 0.6651
    expected = [q[0] / 0.5, q[0] / 0.5, q[1] / 0.25, q[2] / 0.25]
    np.testing.assert_allclose(expected, [0.180388, 0.180388, 0.978738, 2.660484], rtol=1e-5)
    weights = score_bin_weights(y, temperature=1.0, n_bins=3)
    assert weights.dtype == np.float32
    np.testing.assert_allclose(weights, expected, rtol=1e-5)


def test_weights_are_clipped_and_empty_bins_get_nothing():
    # Nine zeros and a one in 2 bins: p = (0.9, 0.1); temperature 0.1 puts ~99% of the mass on
    # the top bin, whose single sample would weigh 0.993 / 0.1 = 9.9 -> clipped to 5.
    y = np.array([0.0] * 9 + [1.0])
    weights = score_bin_weights(y, temperature=0.1, n_bins=2)
    low = math.exp(-5) / (1 + math.exp(-5)) * 0.9 / 0.901
    high = 1 / (1 + math.exp(-5)) * 0.1 / 0.101
    np.testing.assert_allclose(weights[:9], low / (low + high) / 0.9, rtol=1e-5)  # 0.0075
    assert weights[9] == 5.0
    # An empty middle bin changes nothing for the others: its occupancy factor is 0.
    gap = score_bin_weights(np.array([0.0] * 9 + [2.0]), temperature=0.3, n_bins=4)
    np.testing.assert_allclose(gap, weights, rtol=1e-5)  # (2 - 0.5) / 0.3 = 5 as above


def test_adaptive_temperature():
    # y - max y = -10..0; its 0.9 quantile is -1.
    assert adaptive_temperature(np.arange(11.0)) == pytest.approx(1.0)
    assert adaptive_temperature(np.arange(11.0), quantile=0.5) == pytest.approx(5.0)
    assert adaptive_temperature(np.ones(5)) == 1e-3  # floored


def test_constant_scores_and_bad_temperature():
    np.testing.assert_allclose(score_bin_weights(np.ones(4), 0.1), np.ones(4), rtol=1e-3)
    with pytest.raises(MatchoptError, match="temperature"):
        score_bin_weights(np.ones(4), 0.0)
