"""The BoTorch function tasks: BoTorch's own values, the data recipe, the unbounded oracle,
autograd gradients, and Styblinski-Tang unchanged by its move onto the shared recipe."""

import hashlib

import numpy as np
import pytest
import torch
from botorch import test_functions

from matchopt.tasks import TASKS
from matchopt.tasks.botorch_functions import BOTORCH_TASKS, BoTorchFunctionTask
from matchopt.tasks.synthetic import StyblinskiTang

#: The new tasks and Styblinski-Tang, which follows the same recipe.
ALL = (*BOTORCH_TASKS, StyblinskiTang)


@pytest.fixture(scope="module", params=ALL, ids=lambda cls: cls.name)
def task(request):
    return request.param()


def _fresh(cls):
    """BoTorch's function built afresh, with its usual bounds (it refuses designs outside)."""
    d = cls.space.shape[0]
    return getattr(test_functions, cls.botorch_name)(dim=d, negate=True, **cls.botorch_kwargs)


def _botorch_values(cls, x, bounded=True):
    f = _fresh(cls)
    x = torch.as_tensor(np.asarray(x, dtype=np.float64))
    with torch.no_grad():
        # _evaluate_true is the formula without BoTorch's bounds check (for designs outside).
        return (f(x) if bounded else -f._evaluate_true(x)).numpy()


def _random_inside(cls, n, seed):
    return np.random.default_rng(seed).uniform(*cls.bounds, size=(n, cls.space.shape[0]))


def test_the_tasks_are_distinct_new_continuous_tasks():
    assert len(BOTORCH_TASKS) >= 3
    names = [cls.name for cls in BOTORCH_TASKS]
    assert len(set(names)) == len(names) and not set(names) & set(TASKS.keys() - set(names))
    assert all(name == name.lower() for name in names)
    dims = {cls.space.shape[0] for cls in BOTORCH_TASKS}
    assert len(dims) == len(BOTORCH_TASKS) and all(6 <= d <= 60 for d in dims)
    for cls in ALL:
        assert issubclass(cls, BoTorchFunctionTask) and cls.embedded
        assert cls.space.kind == "continuous"
        assert 1_000 <= cls.offline_size <= 2_500


def test_the_box_is_botorchs_usual_domain(task):
    lo, hi = _fresh(type(task)).bounds.numpy()
    assert (lo == task.bounds[0]).all() and (hi == task.bounds[1]).all()


def test_the_oracle_is_botorchs_function(task):
    cls = type(task)
    # Offline rows (float32, as stored) score as BoTorch scores them, and as recorded.
    expected = _botorch_values(cls, task.offline.x)
    np.testing.assert_array_equal(task.score(task.offline.x), expected)
    np.testing.assert_array_equal(task.offline.y, expected)
    # Random float64 designs inside the box: function() keeps float64, score() rounds the
    # designs to float32 (the space's dtype) first.
    x = _random_inside(cls, 64, seed=7)
    np.testing.assert_allclose(cls.function(x), _botorch_values(cls, x), rtol=1e-12, atol=0)
    x32 = x.astype(np.float32)
    np.testing.assert_allclose(task.score(x), _botorch_values(cls, x32), rtol=1e-12, atol=0)


def test_the_offline_split_follows_the_recipe(task):
    cls = type(task)
    again = cls()
    np.testing.assert_array_equal(task.offline.x, again.offline.x)
    np.testing.assert_array_equal(task.offline.y, again.offline.y)
    assert (task.y_min, task.y_max) == (again.y_min, again.y_max)
    # The full data rebuilt here: n_full float32 draws in the box, their scores and the cut.
    d = cls.space.shape[0]
    rng = np.random.default_rng(cls.data_seed)
    x_full = rng.uniform(*cls.bounds, size=(cls.n_full, d)).astype(np.float32)
    y_full = _botorch_values(cls, x_full)
    cut = np.percentile(y_full, cls.max_percentile)
    np.testing.assert_array_equal(task.offline.x, x_full[y_full <= cut])
    assert (task.y_min, task.y_max) == (y_full.min(), y_full.max())
    assert len(task.offline) == cls.offline_size
    assert task.offline.x.shape == (cls.offline_size, d)
    assert task.offline.y.max() <= cut
    lo, hi = np.float32(cls.bounds[0]), np.float32(cls.bounds[1])
    assert ((task.offline.x >= lo) & (task.offline.x <= hi)).all()
    # Headroom: the best offline design is mid-range, the known optimum beyond the full data.
    assert task.normalize(task.offline.y.max()) < 0.75
    assert task.normalize(cls.optimum_value) > 1.0


def test_the_oracle_scores_designs_outside_the_box(task):
    cls = type(task)
    lo, hi = cls.bounds
    d = cls.space.shape[0]
    width = hi - lo
    outside = np.stack([np.full(d, hi + 0.5 * width), np.full(d, lo - 0.25 * width)])
    outside[1, ::2] = 0.5 * (lo + hi)  # half the coordinates inside, half outside
    with pytest.raises(ValueError, match="within the bounds"):
        _botorch_values(cls, outside)  # why the task builds its function unbounded
    scores = task.score(outside)
    assert scores.shape == (2,) and np.isfinite(scores).all()
    expected = _botorch_values(cls, outside.astype(np.float32), bounded=False)
    np.testing.assert_allclose(scores, expected, rtol=1e-12, atol=0)


def test_the_gradient_matches_finite_differences(task):
    cls = type(task)
    d = cls.space.shape[0]
    x = _random_inside(cls, 2, seed=11)
    x[1] += 0.3 * (cls.bounds[1] - cls.bounds[0])  # one point partly outside the box
    eps = 1e-6 * (cls.bounds[1] - cls.bounds[0])
    f = cls.function
    numeric = np.stack([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(d)], axis=1)
    grad = cls.gradient(x)
    assert grad.shape == x.shape and grad.dtype == np.float64
    scale = np.abs(grad).max(axis=1, keepdims=True)
    np.testing.assert_allclose(grad, numeric, rtol=0, atol=1e-6 * scale.max())
    assert (np.abs(grad - numeric) <= 1e-6 * scale).all()


def test_the_known_optimum(task):
    cls = type(task)
    x, value = cls.optimum()
    assert x.shape == cls.space.shape and value == cls.optimum_value
    assert cls.function(x[None])[0] == pytest.approx(value, rel=1e-10, abs=1e-12)
    assert np.abs(cls.gradient(x[None])).max() < 1e-3  # a stationary point
    samples = _random_inside(cls, 20_000, seed=3)
    assert cls.function(samples).max() < value
    nearby = x + np.random.default_rng(4).normal(0, 1e-3, size=(200, x.size))
    assert cls.function(nearby).max() <= value + 1e-9


#: Checksums of Styblinski-Tang computed by synthetic.py BEFORE it moved onto
#: BoTorchFunctionTask (its own StyblinskiTang(Task) with _styblinski_tang); exact float64.
ST_BEFORE = {
    "x_sha256": "9947c8582966c6468ab17fb9d765be2d4a5f77da089d1949c0c8a99a1d5cef6b",
    "x_sum": 3159.523415204225,
    "y_sha256": "578c868d0eef272093337b3c0326be245050b11a48b60e4f8a5096d270485892",
    "y_sum": -100248.46671218038,
    "y_min": -528.6945725034401,
    "y_max": 288.7781468840454,
    # on np.random.default_rng(123).uniform(-7, 7, size=(8, 10)) (partly outside the box)
    "score_sha256": "526ae968afe2e3aac27d8e70e90bc17ef7405f30623a5589d48f14e29cd02a52",
    "score_sum": -6833.26382986283,
    "function_sha256": "2ca19c59d80892096477c3ab22729a062e788cf64fd2cf41ae2d067100444310",
    "gradient_sha256": "cd05c5aad6b12a3681cf6a5aad5912c9a590de80bd01b2ef720e7f4232dc6334",
    "gradient_sum": 1317.476802716457,
    "function_3d_sum": -2059.2686593811804,  # the first 3 columns: any dimension is accepted
}


def _sha(array):
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def test_styblinski_tang_is_bit_identical_to_before_the_refactor():
    task = StyblinskiTang()
    x, y = task.offline.x, task.offline.y
    assert (x.dtype, x.shape, y.dtype) == (np.float32, (2500, 10), np.float64)
    assert _sha(x) == ST_BEFORE["x_sha256"]
    assert float(x.astype(np.float64).sum()) == ST_BEFORE["x_sum"]
    assert _sha(y) == ST_BEFORE["y_sha256"]
    assert float(y.sum()) == ST_BEFORE["y_sum"]
    assert (task.y_min, task.y_max) == (ST_BEFORE["y_min"], ST_BEFORE["y_max"])
    p = np.random.default_rng(123).uniform(-7, 7, size=(8, 10))
    assert _sha(task.score(p)) == ST_BEFORE["score_sha256"]
    assert float(task.score(p).sum()) == ST_BEFORE["score_sum"]
    assert _sha(StyblinskiTang.function(p)) == ST_BEFORE["function_sha256"]
    assert _sha(StyblinskiTang.gradient(p)) == ST_BEFORE["gradient_sha256"]
    assert float(StyblinskiTang.gradient(p).sum()) == ST_BEFORE["gradient_sum"]
    assert float(StyblinskiTang.function(p[:, :3]).sum()) == ST_BEFORE["function_3d_sum"]
    attributes = (
        StyblinskiTang.name,
        StyblinskiTang.summary,
        StyblinskiTang.space,
        StyblinskiTang.offline_size,
        StyblinskiTang.embedded,
        StyblinskiTang.bounds,
        StyblinskiTang.n_full,
        StyblinskiTang.max_percentile,
        StyblinskiTang.data_seed,
        StyblinskiTang.optimum_x,
        StyblinskiTang.optimum_value,
    )
    assert attributes == (
        "styblinski-tang",
        "negated Styblinski-Tang, 10-d continuous, known gradient (embedded)",
        StyblinskiTang.space.continuous(10),
        2_500,
        True,
        (-5.0, 5.0),
        5_000,
        50.0,
        0,
        -2.903534,
        391.6616570377142,
    )
