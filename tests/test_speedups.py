"""The exact speedups of issue 12 change no result beyond float rounding.

Each test runs the fast path and the reference path from the same state and compares: equal
designs where the computation is the same, parameters or gradients within a stated tolerance
where only the summation order changes.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from matchopt.models import GaussianMLP, adam, bootstrap_weights, fit_gaussian

# Float32 rounding of a few dozen Adam steps: differences of a few ulps of O(0.1) parameters.
PARAMETER_TOLERANCE = 1e-6


def max_parameter_difference(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


@pytest.fixture
def regression_data():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(300, 6, generator=generator)
    y = x[:, 0] - 0.5 * x[:, 1] ** 2 + 0.1 * torch.randn(300, generator=generator)
    return x, y


def test_fused_adam_matches_the_foreach_update(regression_data):
    x, y = regression_data
    torch.manual_seed(0)
    start = GaussianMLP(6, (32, 32))
    trained = []
    for fused in (True, False):
        model = copy.deepcopy(start)
        optimizer = adam(model.parameters(), lr=1e-3, fused=fused)
        assert bool(optimizer.defaults.get("fused")) is fused
        for step in range(40):
            batch = slice(step % 4 * 64, step % 4 * 64 + 64)
            loss = model.nll(x[batch], y[batch]).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        trained.append(model)
    assert max_parameter_difference(*trained) < PARAMETER_TOLERANCE
    assert max_parameter_difference(trained[0], start) > 1e-3  # it did train


def test_adamw_groups_keep_their_weight_decay():
    model = torch.nn.Linear(3, 2)
    groups = [
        {"params": [model.weight], "weight_decay": 0.1},
        {"params": [model.bias], "weight_decay": 0.0},
    ]
    optimizer = adam(groups, lr=1e-3, decoupled=True)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]


def test_skipping_zero_weight_rows_gives_the_same_training(regression_data):
    x, y = regression_data
    weights = torch.from_numpy(bootstrap_weights(len(x), 1, np.random.default_rng(3))[0])
    assert (weights == 0).float().mean() > 0.3  # a bootstrap leaves about 37% of rows out
    torch.manual_seed(0)
    start = GaussianMLP(6, (32, 32))
    trained, losses = [], []
    for skip in (True, False):
        model = copy.deepcopy(start)
        losses.append(
            fit_gaussian(
                model,
                x,
                y,
                epochs=4,
                batch_size=50,
                lr=1e-3,
                sample_weights=weights,
                generator=torch.Generator().manual_seed(1),
                skip_zero_weights=skip,
            )
        )
        trained.append(model)
    assert max_parameter_difference(*trained) < PARAMETER_TOLERANCE
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)


def test_an_all_zero_batch_still_takes_an_adam_step(regression_data):
    x, y = regression_data
    weights = torch.zeros(len(x))
    weights[:10] = 1.0  # with batch 10 and a shuffle, most batches hold no weighted row
    torch.manual_seed(0)
    start = GaussianMLP(6, (8,))
    trained = []
    for skip in (True, False):
        model = copy.deepcopy(start)
        fit_gaussian(
            model,
            x,
            y,
            epochs=2,
            batch_size=10,
            lr=1e-2,
            sample_weights=weights,
            generator=torch.Generator().manual_seed(2),
            skip_zero_weights=skip,
        )
        trained.append(model)
    assert max_parameter_difference(*trained) < PARAMETER_TOLERANCE
