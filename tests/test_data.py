"""OfflineData: the offline table methods are fitted on."""

import numpy as np

from matchopt.data import DesignSpace, OfflineData


def test_replicates_averaged_keeps_first_appearance_order_and_means():
    data = OfflineData(
        np.array([[0, 1], [1, 1], [0, 1], [2, 0]]), np.array([1.0, 5.0, 3.0, 2.0]),
        DesignSpace.discrete(2, 3),
    )  # fmt: skip
    averaged = data.replicates_averaged()
    np.testing.assert_array_equal(averaged.x, [[0, 1], [1, 1], [2, 0]])
    np.testing.assert_array_equal(averaged.y, [2.0, 5.0, 2.0])
    distinct = OfflineData(data.x[1:], data.y[1:], data.space)
    assert distinct.replicates_averaged() is distinct
