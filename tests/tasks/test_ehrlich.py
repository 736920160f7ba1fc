import importlib.util
import sys
import warnings

import numpy as np
import pytest
import torch

from matchopt.errors import MatchoptError
from matchopt.tasks import ehrlich
from matchopt.tasks.ehrlich import EHRLICH_TASKS, EhrlichTask

needs_holo = pytest.mark.skipif(
    importlib.util.find_spec("holo") is None, reason="pytorch-holo is not installed"
)


@pytest.fixture(scope="module", params=EHRLICH_TASKS, ids=lambda cls: cls.name)
def task(request):
    return request.param()


def fresh_holo(cls):
    """A new holo Ehrlich object with the instance's parameters (not the cached one)."""
    from holo.test_functions.closed_form import Ehrlich

    return Ehrlich(
        num_states=cls.num_states,
        dim=cls.dim,
        num_motifs=cls.num_motifs,
        motif_length=cls.motif_length,
        quantization=cls.quantization,
        epistasis_factor=cls.epistasis_factor,
        random_seed=cls.holo_seed,
    )


@needs_holo
def test_instances_are_distinct_and_documented():
    names = [cls.name for cls in EHRLICH_TASKS]
    assert len(set(names)) == len(names) >= 3
    assert {cls.num_states for cls in EHRLICH_TASKS} == {4, 20}
    assert min(cls.dim for cls in EHRLICH_TASKS) <= 16 and max(c.dim for c in EHRLICH_TASKS) >= 32
    for cls in EHRLICH_TASKS:
        assert issubclass(cls, EhrlichTask) and cls.embedded and cls.data_status() == "embedded"
        assert cls.space.shape == (cls.dim,) and cls.space.vocab_size == cls.num_states
        assert f"{cls.dim} tokens of {cls.num_states}" in cls.summary
        assert 1_000 <= cls.offline_size <= 2_000


@needs_holo
def test_oracle_is_holos_own_function(task):
    cls = type(task)
    holo = fresh_holo(cls)
    rng = np.random.default_rng(7)
    optimum, value = cls.optimum()
    designs = np.concatenate(
        [
            task.offline.x[:200],
            rng.integers(0, cls.num_states, size=(200, cls.dim)),
            holo.optimal_solution().numpy()[None],
        ]
    )
    with torch.no_grad():
        expected = holo(torch.as_tensor(designs)).double().numpy()
    scores = task.score(designs)
    assert scores.dtype == np.float64 and np.isfinite(scores).all()
    feasible = np.isfinite(expected)
    np.testing.assert_array_equal(scores[feasible], expected[feasible])
    # holo scores infeasible sequences -inf; the task scores them 0 (the paper's definition).
    assert (expected[~feasible] == -np.inf).all() and (scores[~feasible] == 0.0).all()
    assert (~feasible).any()  # uniform random sequences are mostly infeasible
    np.testing.assert_array_equal(optimum, designs[-1])
    assert value == scores[-1] == 1.0
    assert task.normalize(1.0) == pytest.approx(1.0 / task.y_max) and task.y_min == 0.0
    # Offline scores are the oracle's (scored straight from the read-only offline array).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(task.score(task.offline.x[:200]), task.offline.y[:200])


@needs_holo
def test_offline_split_is_deterministic_and_sized(task):
    cls = type(task)
    again = cls()
    np.testing.assert_array_equal(task.offline.x, again.offline.x)
    np.testing.assert_array_equal(task.offline.y, again.offline.y)
    assert task.offline.x.shape == (cls.offline_size, cls.dim)
    assert task.offline.x.dtype == np.int64 and task.offline.y.dtype == np.float64
    assert task.offline.x.min() >= 0 and task.offline.x.max() < cls.num_states
    y_full = cls.function(cls.full_designs())
    assert len(y_full) == cls.n_samples + cls.n_mutants
    cut = np.percentile(y_full, cls.max_percentile)
    assert task.offline.y.max() <= cut
    assert len(task.offline) == int((y_full <= cut).sum())
    assert (task.y_min, task.y_max) == (y_full.min(), y_full.max())


@needs_holo
def test_scores_spread(task):
    y = task.offline.y
    assert len(np.unique(y)) >= 5
    assert task.y_min <= y.min() and y.max() < task.y_max
    # Headroom: the offline best is at most half the optimum (1.0), and few rows reach it.
    assert y.max() <= 0.5
    y_full = type(task).function(type(task).full_designs())
    assert np.mean(y_full == 1.0) < 0.01


@needs_holo
def test_dmp_samples_are_feasible_and_mutants_differ():
    cls = EHRLICH_TASKS[0]
    x = cls.full_designs()
    samples, mutants = x[: cls.n_samples], x[cls.n_samples :]
    holo = fresh_holo(cls)
    with torch.no_grad():
        assert torch.isfinite(holo(torch.as_tensor(samples))).all()
    # Each mutant is within max_mutations point changes of a sample (its parent); few of them
    # coincide with a sample (a change lands on another sample's token).
    distance = (mutants[:, None, :] != samples[None, :, :]).sum(axis=2).min(axis=1)
    assert distance.max() <= cls.max_mutations
    assert (distance == 0).mean() < 0.05


def test_missing_holo_gives_one_line_error(monkeypatch):
    for key in [k for k in sys.modules if k == "holo" or k.startswith("holo.")]:
        monkeypatch.setitem(sys.modules, key, None)
    monkeypatch.setitem(sys.modules, "holo", None)
    ehrlich._ehrlich.cache_clear()
    try:
        for cls in EHRLICH_TASKS:
            with pytest.raises(MatchoptError) as info:
                cls()
            message = str(info.value)
            assert "\n" not in message and repr(cls.name) in message
            assert "pip install --no-deps pytorch-holo==0.0.5 && pip install pooch" in message
    finally:
        ehrlich._ehrlich.cache_clear()
