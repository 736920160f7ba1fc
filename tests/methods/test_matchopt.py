import numpy as np
import pandas as pd
import pytest
import torch

from matchopt.data import DesignSpace, OfflineData
from matchopt.errors import MatchoptError
from matchopt.methods import make_method
from matchopt.methods.matchopt import (
    MatchOpt,
    MatchOptConfig,
    fused_loss_and_gradients,
    gradient_matching_loss,
    line_integral_estimates,
    quadrature_rule,
    rank_buckets,
    sample_trajectories,
)
from matchopt.models import MLP
from matchopt.tabular import TableOptimizer
from matchopt.tabular.known_tables import noise_table
from matchopt.tasks import load_task


def test_buckets_and_trajectories():
    rng = np.random.default_rng(0)
    y = rng.normal(size=1000)
    buckets = rank_buckets(y, 128)
    assert len(buckets) == 128
    assert [len(b) for b in buckets[:-1]] == [1000 // 128] * 127
    assert len(buckets[-1]) == 1000 - 127 * (1000 // 128)  # last bucket takes the remainder
    trajectories = sample_trajectories(buckets, rng)
    assert trajectories.shape == (1000 // 128, 128)
    for traj in trajectories:
        assert np.all(np.diff(y[traj]) >= 0)  # monotone in y
        for k, index in enumerate(traj):  # exactly one point from each bucket, in order
            assert index in buckets[k]
    # within an epoch no row is used twice
    assert len(np.unique(trajectories)) == trajectories.size


def test_too_few_rows_is_a_clear_error():
    with pytest.raises(MatchoptError, match="at least trajectory_length=128"):
        rank_buckets(np.arange(50.0), 128)


class KnownFunction(torch.nn.Module):
    """g(x) = sum(sin(x)) + 0.5 * |x|^2: smooth, with a known line integral g(x') - g(x)."""

    def forward(self, x):
        return torch.sin(x).sum(-1) + 0.5 * (x**2).sum(-1)


def test_quadratures_against_the_exact_line_integral():
    torch.manual_seed(0)
    x = torch.randn(20, 6, dtype=torch.float64) * 0.5
    g = KnownFunction()
    exact_difference = (g(x[1:]) - g(x[:-1])).detach()

    exact = line_integral_estimates(g, x, quadrature_rule("exact", 5))
    torch.testing.assert_close(exact, exact_difference)

    trapezoid = line_integral_estimates(g, x, quadrature_rule("trapezoid", 5))
    error = float((trapezoid - exact_difference).detach().abs().max())
    assert error < 0.02 * float(exact_difference.abs().mean())  # under 2% of a typical dz
    finer = line_integral_estimates(g, x, quadrature_rule("trapezoid", 50))
    finer_error = float((finer - exact_difference).detach().abs().max())
    assert finer_error == pytest.approx(error / 100, rel=0.1)  # trapezoid error ~ 1/kappa^2

    left = line_integral_estimates(g, x, quadrature_rule("left-riemann", 5))
    # left Riemann = trapezoid + (f(0) - f(1)) / (2 kappa) for the integrand f
    t0 = x[:-1].clone().requires_grad_(True)
    t1 = x[1:].clone().requires_grad_(True)
    (g0,) = torch.autograd.grad(g(t0).sum(), t0)
    (g1,) = torch.autograd.grad(g(t1).sum(), t1)
    dx = x[1:] - x[:-1]
    correction = ((g0 * dx).sum(-1) - (g1 * dx).sum(-1)) / 10
    torch.testing.assert_close(left, trapezoid + correction)

    midpoint = line_integral_estimates(g, x, quadrature_rule("midpoint", 5))
    midpoint_error = midpoint.detach() - exact_difference
    # For smooth f the midpoint error is about -1/2 the trapezoid's (both ~ 1/kappa^2).
    ratio = midpoint_error / (trapezoid.detach() - exact_difference)
    torch.testing.assert_close(ratio, torch.full_like(ratio, -0.5), atol=0.05, rtol=0)


def test_midpoint_nodes_lie_inside_the_intervals():
    rule = quadrature_rule("midpoint", 4)
    assert rule.interior_t == (0.125, 0.375, 0.625, 0.875)
    assert rule.interior_weights == (0.25,) * 4
    assert rule.start_weight == rule.end_weight == 0
    one = quadrature_rule("midpoint", 1)
    assert one.interior_t == (0.5,) and one.interior_weights == (1.0,)


@pytest.mark.numerics
@pytest.mark.parametrize(
    "d, hidden, quadrature, kappa, alpha",
    [
        (24, (512, 128, 32), "trapezoid", 5, 1.0),
        (7, (16,), "left-riemann", 5, 0.5),
        (5, (8, 6), "trapezoid", 3, 0.0),
        (3, (4, 4, 4, 4), "trapezoid", 1, 2.0),
        (24, (512, 128, 32), "midpoint", 1, 1.0),
        (6, (8, 6), "midpoint", 3, 0.0),
    ],
)
def test_fused_step_equals_autograd(d, hidden, quadrature, kappa, alpha):
    torch.manual_seed(0)
    model = MLP(d, hidden)
    x = torch.randn(40, d)
    y = torch.sort(torch.randn(40)).values
    rule = quadrature_rule(quadrature, kappa)
    loss = gradient_matching_loss(model, x, y, rule, alpha)
    loss.backward()
    expected = [
        p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()
    ]
    for p in model.parameters():
        p.grad = None
    value = fused_loss_and_gradients(model, x, y, rule, alpha)
    assert value == pytest.approx(loss.item(), rel=1e-5)
    for want, p in zip(expected, model.parameters()):
        torch.testing.assert_close(p.grad, want, rtol=1e-4, atol=1e-6)


def _fit_propose(task_name, seed, **overrides):
    method = make_method("matchopt", "quick", overrides, seed=seed)
    return method.fit(load_task(task_name).offline).propose(128)


@pytest.mark.numerics
@pytest.mark.parametrize("task_name", ["styblinski-tang", "potts"])
def test_same_seed_same_designs(task_name):
    first = _fit_propose(task_name, 3)
    np.testing.assert_array_equal(first, _fit_propose(task_name, 3))
    assert not np.array_equal(first, _fit_propose(task_name, 4, init="random"))


def test_designs_in_task_format():
    tokens = _fit_propose("potts", 0)
    assert tokens.shape == (128, 12) and tokens.dtype == np.int64
    assert tokens.min() >= 0 and tokens.max() <= 3
    floats = _fit_propose("styblinski-tang", 0, init="gaussian")
    assert floats.shape == (128, 10) and floats.dtype == np.float32


def test_autograd_backend_and_exact_quadrature_run():
    data = load_task("styblinski-tang").offline
    for overrides in ({"backend": "autograd"}, {"quadrature": "exact"}):
        config = MatchOptConfig(hidden=(16,), epochs=1, trajectory_length=32, search_steps=2)
        config = MatchOptConfig(**{**config.__dict__, **overrides})
        designs = MatchOpt(config, seed=0).fit(data).propose(16)
        assert designs.shape == (16, 10)


def test_user_data_without_a_task():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(300, 3))
    y = -((x - 0.5) ** 2).sum(1)
    data = OfflineData(x, y, DesignSpace.continuous(3))
    method = MatchOpt(MatchOptConfig(hidden=(32, 16), epochs=20, trajectory_length=16), seed=0)
    designs = method.fit(data).propose(8)
    assert designs.shape == (8, 3)
    assert method.predict(designs).shape == (8,)


def test_propose_before_fit_is_a_clear_error():
    with pytest.raises(MatchoptError, match="fitted"):
        MatchOpt().propose(4)


@pytest.mark.parametrize("setting", ["alpha=-1000", "alpha=1e308", "kappa=100000000", "kappa=0"])
def test_config_values_outside_their_stated_range_are_refused(setting, capsys):
    from matchopt import cli

    args = ["run", "--task", "potts", "--method", "matchopt", "--preset", "quick"]
    assert cli.main([*args, "--set", setting, "--out", "unused"]) == 2
    key = setting.split("=")[0]
    assert f"--set {key}=" in capsys.readouterr().err


def test_the_validated_preset_holds_out_whole_designs():
    frame, _ = noise_table(sequences=60, replicates=3)
    opt = TableOptimizer(
        target="activity", sequence="seq", method="matchopt", preset="validated-quick",
        overrides={"trajectory_length": 8}, seed=0,
    ).fit(frame)  # fmt: skip
    data, validator = opt.data_, opt.method_.validator_
    scores = opt.method_.encoder_.encode_y(data.y).astype(validator.y.dtype)
    held = np.isin(scores, validator.y)
    held_designs = {tuple(row) for row in data.x[held]}
    counts = pd.Series([tuple(row) for row in data.x]).value_counts()
    assert held_designs and all(counts[d] == 3 for d in held_designs)
    # Every replicate of a held-out design is held out (its three scores are among the held).
    for design in held_designs:
        rows = np.flatnonzero((data.x == np.array(design)).all(1))
        assert held[rows].all()
