"""OfflineData: the offline table methods are fitted on."""

import numpy as np
import pytest

from matchopt.data import DesignSpace, OfflineData, design_groups
from matchopt.errors import MatchoptError
from matchopt.tasks import load_task


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


def test_continuous_designs_must_be_real_and_within_float32():
    task = load_task("styblinski-tang")
    d = task.space.shape[0]
    beyond = np.zeros((2, d))
    beyond[1, 3] = 1e39  # finite in float64, inf once cast to the space's float32
    with pytest.raises(MatchoptError, match="row 1, column 3 is 1e.39: NaN, infinite or beyond"):
        task.score(beyond)
    for bad in (np.zeros((1, d), complex), np.full((1, d), "1.0")):
        with pytest.raises(MatchoptError, match="must be real numbers"):
            task.score(bad)


def test_offline_data_is_read_only_and_the_callers_arrays_stay_theirs():
    from matchopt.data import DesignSpace, OfflineData

    x, y = np.zeros((3, 2), np.float32), np.arange(3.0)
    data = OfflineData(x, y, DesignSpace.continuous(2))
    x[0, 0] = 5.0  # the caller's array: still writable, and not shared
    assert data.x[0, 0] == 0.0 and y.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        data.x[0, 0] = 1.0  # a method writing into the data would change the next bench cells
    with pytest.raises(ValueError, match="read-only"):
        data.y[0] = 1.0
