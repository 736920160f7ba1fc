import numpy as np
import pytest

from matchopt.errors import MatchoptError
from matchopt.methods.cma_es import cma_maximize


def concave(x):
    return -((x - 1.5) ** 2).sum(axis=1)


def test_runs_find_the_maximum_and_leave_numpy_alone():
    np.random.seed(7)
    x0 = np.zeros((3, 5), dtype=np.float32)
    best = cma_maximize(concave, x0, sigma0=0.5, max_iterations=100, seeds=np.array([1, 2, 3]))
    assert best.shape == (3, 5) and best.dtype == np.float32
    np.testing.assert_allclose(best, 1.5, atol=0.05)
    assert len({tuple(row) for row in best}) == 3  # different seeds, different runs
    np.random.seed(7)
    expected = np.random.rand()
    np.random.seed(7)
    cma_maximize(concave, x0, 0.5, 3, np.array([1, 2, 3]))
    assert np.random.rand() == expected


@pytest.mark.numerics
def test_lockstep_runs_equal_sequential_runs():
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=(4, 6)).astype(np.float32)
    seeds = np.array([11, 12, 13, 14])
    together = cma_maximize(concave, x0, 0.5, 20, seeds)
    alone = np.concatenate(
        [cma_maximize(concave, x0[i : i + 1], 0.5, 20, seeds[i : i + 1]) for i in range(4)]
    )
    np.testing.assert_array_equal(together, alone)


def test_zero_iterations_is_a_clear_error():
    with pytest.raises(MatchoptError, match="max_iterations"):
        cma_maximize(concave, np.zeros((1, 2)), 0.5, 0, np.array([1]))


def test_runs_in_groups_equal_runs_all_at_once():
    """``runs_at_once`` bounds memory (d x d matrices per run) without changing any run: each
    draws from its own generator, and a row-wise score sees the same candidates."""
    rng = np.random.default_rng(1)
    x0 = rng.normal(size=(5, 4)).astype(np.float32)
    seeds = np.array([21, 22, 23, 24, 25])
    together = cma_maximize(concave, x0, 0.5, 20, seeds)
    for size in (1, 2, 5, 9):
        np.testing.assert_array_equal(
            cma_maximize(concave, x0, 0.5, 20, seeds, None, False, size), together
        )


def test_the_default_group_size_keeps_the_covariances_within_the_memory_bound(monkeypatch):
    """None advances as many runs as LOCKSTEP_MEMORY holds (all 128 at once on hopper would
    need 54 GB), and gives the same runs as any explicit group size."""
    import matchopt.methods.cma_es as cma_es

    rng = np.random.default_rng(1)
    x0 = rng.normal(size=(5, 4)).astype(np.float32)
    seeds = np.array([21, 22, 23, 24, 25])
    sizes = []
    real = cma_es._lockstep_runs
    monkeypatch.setattr(
        cma_es, "_lockstep_runs", lambda score, x, *a: (sizes.append(len(x)), real(score, x, *a))[1]
    )
    monkeypatch.setattr(cma_es, "LOCKSTEP_MEMORY", 2 * 8 * 4**2 * 2)  # two runs of d = 4
    bounded = cma_maximize(concave, x0, 0.5, 20, seeds)
    assert sizes == [2, 2, 1]
    np.testing.assert_array_equal(
        bounded, cma_maximize(concave, x0, 0.5, 20, seeds, None, False, 5)
    )
