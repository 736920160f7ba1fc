import numpy as np

from matchopt.data import DesignSpace, OfflineData
from matchopt.methods import make_method


def test_continuous_designs_fill_the_offline_box():
    rng = np.random.default_rng(0)
    x = rng.uniform([-1.0, 10.0], [2.0, 11.0], size=(500, 2)).astype(np.float32)
    data = OfflineData(x, rng.normal(size=500), DesignSpace.continuous(2))
    designs = make_method("random", seed=3).fit(data).propose(2000)
    assert designs.dtype == np.float32
    assert (designs >= x.min(0)).all() and (designs <= x.max(0)).all()
    np.testing.assert_allclose(designs.mean(0), (x.min(0) + x.max(0)) / 2, atol=0.1)
    other = make_method("random", seed=4).fit(data).propose(2000)
    assert not np.array_equal(designs, other)


def test_discrete_designs_use_every_token_uniformly():
    rng = np.random.default_rng(0)
    x = np.zeros((50, 8), dtype=np.int64)  # the offline data uses token 0 only
    data = OfflineData(x, rng.normal(size=50), DesignSpace.discrete(8, 5))
    designs = make_method("random").fit(data).propose(4000)
    assert designs.dtype == np.int64
    counts = np.bincount(designs.ravel(), minlength=5) / designs.size
    np.testing.assert_allclose(counts, 0.2, atol=0.01)
