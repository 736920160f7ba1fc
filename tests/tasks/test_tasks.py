"""The task registry (matchopt.tasks, its __init__): the embedded tasks, deterministic and sized."""

import numpy as np
import pytest

from matchopt.tasks import TASKS, load_task

EMBEDDED = [name for name, cls in TASKS.items() if cls.embedded]


def test_at_least_one_continuous_and_one_discrete_embedded_task():
    kinds = {TASKS[name].space.kind for name in EMBEDDED}
    assert kinds == {"continuous", "discrete"}


@pytest.mark.parametrize("name", EMBEDDED)
def test_embedded_tasks_are_deterministic_and_sized(name):
    first, second = load_task(name), load_task(name)
    np.testing.assert_array_equal(first.offline.x, second.offline.x)
    np.testing.assert_array_equal(first.offline.y, second.offline.y)
    assert len(first.offline) == first.offline_size
    scores = first.score(first.offline.x[:10])
    if hasattr(first, "assay_statistics"):  # noisy replicates of the noiseless function
        assert first.y_min < first.offline_best() < first.y_max
        assert np.corrcoef(first.score(first.offline.x), first.offline.y)[0, 1] > 0.2
    else:
        assert first.y_min < first.offline.y.max() < first.y_max
        np.testing.assert_allclose(scores, first.offline.y[:10])
    assert first.data_status() == "embedded"
