"""Gaussian forward models and their bootstrapped ensembles (matchopt.models.gaussian), the
surrogate of GA, Ens-Mean/Min, CMA-ES, BO-qEI and CbAS."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from roundoff import SAFETY, TRAINING_ROUNDOFF, _flat, dot_roundoff

import matchopt.models.gaussian as gaussian_module
from matchopt.methods import make_method
from matchopt.methods.training import fit_seeds
from matchopt.models import EnsembleConfig, GaussianEnsemble, GaussianMLP, bootstrap_weights
from matchopt.models.gaussian import fit_gaussian, soft_clamp
from matchopt.tasks import load_task


def _line(n=256, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=generator)
    return x, 2.0 * x[:, 0] - x[:, 1]


def test_soft_clamp_is_monotone_between_its_smooth_limits():
    # design-baselines' clamp: high - softplus(high - x), then low + softplus(. - low); its
    # limits are low (x -> -inf) and low + softplus(high - low) (x -> +inf), log 0.3 here.
    low, high = torch.tensor(math.log(0.1)), torch.tensor(math.log(0.2))
    values = soft_clamp(torch.linspace(-50, 50, 101), low, high)
    upper = low + torch.nn.functional.softplus(high - low)
    assert (values >= low).all() and (values <= upper + 1e-6).all()
    torch.testing.assert_close(values[[0, -1]], torch.stack([low, upper]))
    assert torch.all(values[1:] >= values[:-1])


def test_bootstrap_weights_are_seeded_counts_of_n_draws():
    weights = bootstrap_weights(100, 3, np.random.default_rng(0))
    assert weights.shape == (3, 100) and (weights.sum(1) == 100).all()
    assert (weights >= 0).all() and weights.dtype.kind == "i"
    np.testing.assert_array_equal(weights, bootstrap_weights(100, 3, np.random.default_rng(0)))
    assert 0.25 < (weights == 0).mean() < 0.45  # about 1/e of the rows are left out


def test_fitting_lowers_the_likelihood_loss_and_learns_the_data():
    x, y = _line()
    torch.manual_seed(0)
    model = GaussianMLP(2, (32,))
    losses = fit_gaussian(model, x, y, epochs=60, batch_size=32, lr=1e-2)
    assert losses[-1] < losses[0]
    mean, log_std = model(x)
    assert mean.shape == log_std.shape == (256,)
    assert torch.corrcoef(torch.stack([mean.detach(), y]))[0, 1] > 0.95


def test_zero_weights_leave_rows_out():
    x, y = _line(64)
    weights = torch.zeros(64)
    weights[:32] = 1
    torch.manual_seed(1)
    a = GaussianMLP(2, (8,))
    b = GaussianMLP(2, (8,))
    b.load_state_dict(a.state_dict())
    fit = {"epochs": 2, "batch_size": 16, "lr": 1e-2, "sample_weights": weights}
    fit_gaussian(a, x, y, generator=torch.Generator().manual_seed(3), **fit)
    y_other = y.clone()
    y_other[32:] += 100.0  # rows of weight 0: changing them changes nothing
    fit_gaussian(b, x, y_other, generator=torch.Generator().manual_seed(3), **fit)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)


def test_trained_ensemble_is_frozen_seeded_and_averages_its_members():
    x, y = _line()
    config = dataclasses.replace(EnsembleConfig(), n_models=3, hidden=(16,), epochs=2)
    ensemble = GaussianEnsemble.from_config(x, y, config, seed=4)
    assert not ensemble.training
    assert all(not p.requires_grad for p in ensemble.parameters())
    means = ensemble.member_means(x)
    assert means.shape == (3, 256)
    torch.testing.assert_close(ensemble.predict_mean(x), means.mean(0))
    same = GaussianEnsemble.trained(
        x, y, n_models=3, hidden=(16,), activation="leaky_relu", epochs=2, batch_size=100,
        lr=1e-3, seed=4,
    )  # fmt: skip
    for p, q in zip(ensemble.parameters(), same.parameters()):
        assert torch.equal(p, q)
    other = GaussianEnsemble.from_config(x, y, config, seed=5)
    assert not torch.equal(other.member_means(x), means)


def test_a_member_alone_is_a_stack_of_one():
    from matchopt.models.gaussian import GaussianMLP, fit_members

    x, y = torch.randn(20, 3), torch.randn(20)
    members = [GaussianMLP(3, (4,)), GaussianMLP(3, (4,))]
    with pytest.raises(ValueError, match="stacked=False trains one member, got 2"):
        fit_members(members, x, y, epochs=1, batch_size=5, lr=1e-3, stacked=False)


@pytest.mark.numerics
def test_batched_wide_ensembles_equal_members_trained_one_after_another(monkeypatch):
    """Wide members (Ens-Mean's 2048) train one after another alone, skipping rows of zero
    bootstrap weight; in a seed batch they train in lockstep with those rows weighted 0: the
    same loss, summed in another order."""
    monkeypatch.setattr(gaussian_module, "GROUPED_MAX_WIDTH", 0)
    data = load_task("styblinski-tang").offline
    calls = []
    real = gaussian_module.fit_members

    def counted(*args, **kwargs):
        calls.extend([1] if kwargs.get("stacked") is False else [])  # members trained alone
        return real(*args, **kwargs)

    monkeypatch.setattr(gaussian_module, "fit_members", counted)
    alone = [make_method("ens-mean", "quick", {}, seed=s).fit(data) for s in (3, 4)]
    assert len(calls) == 2 * 5  # each member of each seed in turn
    batch = fit_seeds([make_method("ens-mean", "quick", {}, seed=s) for s in (3, 4)], data)
    assert len(calls) == 10  # the batch trains in lockstep
    for one, batched in zip(alone, batch):
        mine, theirs = _flat(one.ensemble_), _flat(batched.ensemble_)
        assert (mine - theirs).abs().max() <= TRAINING_ROUNDOFF * mine.abs().max()
        designs, reference = batched.propose(16), one.propose(16)
        np.testing.assert_allclose(
            designs, reference, rtol=0, atol=TRAINING_ROUNDOFF * np.abs(reference).max()
        )


@pytest.mark.numerics
def test_a_lockstep_step_of_wide_members_has_each_members_gradients_within_roundoff():
    """Wide members (Ens-Mean's are 2048) trained in a seed batch: one step's gradients are each
    member's own within Higham's bound. Over a training they part further than that (Adam's
    first steps move a weight by about lr times the sign of its gradient, so a near-zero entry
    whose sign round-off flips moves by 2 lr: docs/benchmarks.md), as they do between the
    sequential path with and without its skipping of zero-weight rows."""
    from matchopt.models.gaussian import GaussianMLP, StackedMembers

    generator = torch.Generator().manual_seed(4)
    members = []
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        members.append(GaussianMLP(32, (512, 512)))
    x = torch.randn(3, 128, 32, generator=generator)
    y = torch.randn(3, 128, generator=generator)
    w = torch.rand(3, 128, generator=generator)
    stacked = StackedMembers(members)
    mean, log_std = stacked(x)
    nll = gaussian_module.gaussian_nll(mean, log_std, y)
    ((w * nll).sum(1) / w.sum(1)).sum().backward()
    for k, member in enumerate(members):
        ((w[k] * member.nll(x[k], y[k])).sum() / w[k].sum()).backward()
        linears = [m for m in member.body if isinstance(m, torch.nn.Linear)]
        # Three layers of at most 512 terms, then 128 rows summed into each weight's gradient.
        bound = SAFETY * 8 * dot_roundoff(512 * 128, torch.float32)
        for layer, weight, bias in zip(linears, stacked.weight, stacked.bias):
            for own, batched in (
                (layer.weight.grad.T, weight.grad[k]),
                (layer.bias.grad, bias.grad[k, 0]),
            ):
                assert (batched - own).abs().max() <= bound * own.abs().max()
