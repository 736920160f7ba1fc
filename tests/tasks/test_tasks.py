import numpy as np
import pytest

from matchopt.errors import MatchoptError
from matchopt.tasks import TASKS, load_task
from matchopt.tasks.design_bench import SequenceLookupOracle, TFBind8
from matchopt.tasks.synthetic import ChainPotts, StyblinskiTang

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


def test_styblinski_tang_gradient_matches_finite_differences():
    x = np.random.default_rng(0).uniform(-4, 4, size=(5, 10))
    eps = 1e-6
    f = StyblinskiTang.function
    numeric = np.stack([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(10)], axis=1)
    np.testing.assert_allclose(StyblinskiTang.gradient(x), numeric, rtol=1e-5, atol=1e-5)
    best = np.full((1, 10), StyblinskiTang.optimum_x)
    assert StyblinskiTang.function(best)[0] == pytest.approx(StyblinskiTang.optimum_value)
    # BoTorch's function and autograd agree with the closed forms (float64 round-off: terms of
    # size x^4 <= 256, summed over 10 coordinates).
    x = np.random.default_rng(1).uniform(-6, 6, size=(50, 10))
    closed = -0.5 * np.sum(x**4 - 16 * x**2 + 5 * x, axis=1)
    np.testing.assert_allclose(StyblinskiTang.function(x), closed, rtol=0, atol=1e-11)
    closed_gradient = -0.5 * (4 * x**3 - 32 * x + 5)
    np.testing.assert_allclose(StyblinskiTang.gradient(x), closed_gradient, rtol=0, atol=1e-11)


def test_potts_optimum_is_exact():
    task = ChainPotts()
    sequence, value = task.optimum()
    assert task.function(sequence[None])[0] == pytest.approx(value)
    # No single-site change improves it, and no random sequence beats it.
    for i in range(12):
        for k in range(4):
            other = sequence.copy()
            other[i] = k
            assert task.function(other[None])[0] <= value + 1e-12
    samples = np.random.default_rng(5).integers(0, 4, size=(20000, 12))
    assert task.function(samples).max() <= value


def test_lookup_oracle_takes_the_last_occurrence():
    x = np.array([[0, 1], [1, 0], [0, 1], [3, 3]])
    y = np.array([1.0, 2.0, 3.0, 4.0])
    oracle = SequenceLookupOracle(x, y, vocab_size=4)
    np.testing.assert_array_equal(oracle(np.array([[0, 1], [1, 0], [3, 3]])), [3.0, 2.0, 4.0])
    with pytest.raises(MatchoptError, match="not in the oracle"):
        oracle(np.array([[2, 2]]))


def test_tfbind8_oracle_on_real_rows(data_dir):
    task = load_task("tfbind8", data_dir)
    assert len(task.offline) == 32_898 == TFBind8.offline_size
    assert (task.y_min, task.y_max) == (0.0, 1.0)
    x = np.load(data_dir / "tf_bind_8-SIX6_REF_R1" / "tf_bind_8-x-0.npy")
    y = np.load(data_dir / "tf_bind_8-SIX6_REF_R1" / "tf_bind_8-y-0.npy").reshape(-1)
    rows = np.random.default_rng(0).choice(len(x), size=2000, replace=False)
    np.testing.assert_array_equal(task.score(x[rows].astype(np.int64)), y[rows].astype(np.float64))
    assert task.offline.y.max() <= np.percentile(y, 50)
    assert TFBind8.data_status(data_dir) == "present"


def test_missing_data_names_the_files(tmp_path):
    with pytest.raises(MatchoptError, match="tf_bind_8-x-0.npy"):
        load_task("tfbind8", tmp_path)
    assert TFBind8.data_status(tmp_path) == "missing"


def test_oracle_rejects_malformed_designs():
    task = load_task("potts")
    with pytest.raises(MatchoptError, match="shape"):
        task.score(np.zeros((3, 5), dtype=np.int64))
    with pytest.raises(MatchoptError, match="outside"):
        task.score(np.full((1, 12), 7))


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


def test_run_needs_at_least_one_design():
    from matchopt.runner import run

    for bad in (0, -1, 2.0, True):
        with pytest.raises(MatchoptError, match="n_designs must be an integer >= 1"):
            run("potts", "random", n_designs=bad)


def test_a_design_outside_the_tasks_space_is_never_scored(monkeypatch):
    """However a design was made, the oracle is not asked about one thousands of spans away
    from the data (a crafted shared ensemble gave -220,117 on a [-5, 5] task: p100 -1.6e16)."""
    from matchopt.tasks.base import DOMAIN_SPANS

    task = load_task("styblinski-tang")
    low, high = task.domain()
    assert np.all(low < -5 * DOMAIN_SPANS) and np.all(high > 5 * DOMAIN_SPANS)
    designs = np.zeros((3, 10), np.float32)
    designs[:, 0] = [-9.6, 9.8, 1000.0]  # beyond the box, as searches go: scored
    assert np.isfinite(task.score(designs)).all()
    designs[2, 4] = -220_117.0
    called = []
    monkeypatch.setattr(type(task), "_score", lambda self, x: called.append(x) or x[:, 0])
    with pytest.raises(MatchoptError, match=r"design 2, coordinate 4 is -220117, outside the "):
        task.score(designs)
    assert not called


def test_a_run_whose_method_returns_designs_outside_the_space_writes_no_record(
    monkeypatch, tmp_path, capsys
):
    from matchopt import cli
    from matchopt.methods.random_designs import RandomDesigns

    real = RandomDesigns.propose
    monkeypatch.setattr(RandomDesigns, "propose", lambda self, n=128: real(self, n) * 1e6)
    args = ["run", "--task", "styblinski-tang", "--method", "random", "--preset", "quick"]
    assert cli.main([*args, "--out", str(tmp_path / "R")]) == 2
    assert "outside the space of task 'styblinski-tang'" in capsys.readouterr().err
    assert not list((tmp_path / "R").rglob("seed0.json"))


def test_a_record_that_reading_would_refuse_is_never_written():
    from matchopt.records import RunRecord, check_record

    record = RunRecord(
        "t", "m", 0, "quick", {}, [-1.6e16], -1.6e16, -1.6e16, 0.5, 1e300, 0.0, "0", 1
    )
    with pytest.raises(MatchoptError, match="no record written"):
        check_record(record)
