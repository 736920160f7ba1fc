import numpy as np
import pytest
import torch

from matchopt.data import DesignSpace, OfflineData
from matchopt.errors import MatchoptError
from matchopt.methods import make_method
from matchopt.methods.gradient_ascent import GradientAscent, GradientAscentConfig, ensemble_score
from matchopt.models import GaussianEnsemble


def test_mean_is_a_true_mean_and_min_a_min():
    torch.manual_seed(0)
    ensemble = GaussianEnsemble(3, n_models=4, hidden=(8,))
    x = torch.randn(10, 3)
    means = torch.stack([member(x)[0] for member in ensemble.members])
    mean = ensemble_score(ensemble, x, "mean")
    minimum = ensemble_score(ensemble, x, "min")
    torch.testing.assert_close(mean, means.sum(0) / 4)
    torch.testing.assert_close(minimum, means.min(0).values)
    assert (minimum < mean).all()  # design-baselines' "mean" returns the min


def test_registered_variants_fix_size_and_aggregation():
    ga, ens_mean, ens_min = (make_method(n) for n in ("ga", "ens-mean", "ens-min"))
    assert (ga.config_.n_models, ga.config_.hidden, ga.config_.lr) == (1, (2048, 2048), 3e-4)
    assert (ens_mean.config_.n_models, ens_mean.config_.aggregation) == (5, "mean")
    assert (ens_min.config_.n_models, ens_min.config_.aggregation) == (5, "min")
    with pytest.raises(MatchoptError, match="fixes n_models"):
        make_method("ens-min", overrides={"n_models": "3"})


def test_one_search_step_is_lr_sqrt_d_times_the_gradient():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 9)).astype(np.float32)
    data = OfflineData(x, x.sum(axis=1) + 0.1 * rng.normal(size=300), DesignSpace.continuous(9))
    config = GradientAscentConfig(n_models=2, hidden=(16,), epochs=2, search_steps=1)
    method = GradientAscent(config, seed=0).fit(data)
    designs = method.propose(5)

    start = torch.from_numpy(method.encoder_.encode_x(data.x[data.top_k(5)])).requires_grad_(True)
    ensemble_score(method.ensemble_, start, "mean").sum().backward()
    expected = method.encoder_.decode_x((start + 0.01 * 3.0 * start.grad).detach().numpy())
    np.testing.assert_allclose(designs, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(designs, data.x[data.top_k(5)])


def test_predict_is_in_units_of_y():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 4, size=(400, 6))
    y = 100.0 + 10.0 * (x == 2).sum(axis=1)
    data = OfflineData(x, y, DesignSpace.discrete(6, 4))
    method = make_method("ga", "quick", overrides={"epochs": "30"}).fit(data)
    predicted = method.predict(x)
    assert np.corrcoef(predicted, y)[0, 1] > 0.8
    assert abs(predicted.mean() - y.mean()) < 5.0
