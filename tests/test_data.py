"""OfflineData: the offline table methods are fitted on."""

import numpy as np

from matchopt.data import DesignSpace, OfflineData, design_groups


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


def test_design_groups_number_designs_by_first_appearance():
    x = np.array([[2, 0], [0, 1], [1, 1], [0, 1], [2, 0]])
    np.testing.assert_array_equal(design_groups(x), [0, 1, 2, 1, 0])
    np.testing.assert_array_equal(design_groups(x[1:3]), [0, 1])
    floats = np.array([[0.5], [0.25], [0.5]], dtype=np.float32)
    np.testing.assert_array_equal(design_groups(floats), [0, 1, 0])
