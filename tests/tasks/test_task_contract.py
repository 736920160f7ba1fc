"""Contract tests over every registered task, each on a tiny fixture (tests/task_fixtures.py)."""

import dataclasses

import numpy as np
import pytest
from task_fixtures import make_task

from matchopt.data import OfflineData
from matchopt.errors import MatchoptError
from matchopt.tasks import TASKS

NEEDS = {"hopper": "gymnasium", "hopper-local": "gymnasium", "ant": "mujoco", "dkitty": "mujoco"}
NEEDS.update({name: "holo" for name in TASKS if name.startswith("ehrlich-")})


@pytest.fixture(scope="module", params=list(TASKS))
def task(request, tmp_path_factory):
    name = request.param
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    return make_task(name, tmp_path_factory.mktemp(name))


def test_offline_data_has_the_declared_shape_and_type(task):
    offline = task.offline
    assert isinstance(offline, OfflineData) and offline.space == task.space
    assert offline.x.shape == (len(offline), *task.space.shape) and len(offline) >= 2
    assert offline.x.dtype == task.space.dtype
    assert offline.y.shape == (len(offline),) and np.isfinite(offline.y).all()
    task.space.validate(offline.x)


def test_normalization_uses_the_full_data_range(task):
    from matchopt.tasks.replicates import ReplicateTask

    if isinstance(task, ReplicateTask):
        # Noisy measurements may pass the noiseless range: the range holds the true values.
        true = task.score(np.unique(task.offline.x, axis=0))
        assert task.y_min <= true.min() and task.y_max >= true.max()
    else:
        assert task.y_min <= task.offline.y.min() and task.y_max >= task.offline.y.max()
    assert task.y_max > task.y_min
    normalized = task.normalize(np.array([task.y_min, task.y_max]))
    np.testing.assert_allclose(normalized, [0.0, 1.0])


def test_the_oracle_scores_designs_in_the_tasks_format(task):
    designs = task.offline.x[:3]
    scores = task.score(designs)
    assert scores.shape == (3,) and scores.dtype == np.float64 and np.isfinite(scores).all()
    np.testing.assert_array_equal(task.score(designs), scores)  # deterministic


def test_offline_data_is_only_data(task):
    # Methods see OfflineData alone: no field can reach the task or its oracle.
    fields = {f.name: getattr(task.offline, f.name) for f in dataclasses.fields(task.offline)}
    assert set(fields) == {"x", "y", "space"}
    assert not any(callable(value) for value in fields.values())


def test_bad_designs_are_refused_with_a_clear_error(task):
    shape = task.space.shape
    with pytest.raises(MatchoptError, match="shape"):
        task.score(np.zeros((2, *shape[:-1], shape[-1] + 1), dtype=task.space.dtype))
    bad = task.offline.x[:2].copy()
    if task.space.is_discrete:
        bad[0, 0] = task.space.vocab_size  # a token outside the vocabulary
    else:
        bad[0, 0] = np.nan
    with pytest.raises(MatchoptError):
        task.score(bad)
