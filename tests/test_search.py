"""Starting points and gradient ascent (matchopt.search), which most methods search with."""

import numpy as np
import pytest
import torch

from matchopt.errors import MatchoptError
from matchopt.search import gradient_ascent, starting_points


def _concave(target):
    return lambda x: -((x - target) ** 2).sum(1)


def test_topk_random_and_gaussian_starts():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(50, 3)).astype(np.float64)
    y = rng.normal(size=50)
    top = starting_points(features, y, 5, "topk", rng)
    np.testing.assert_array_equal(top, features[np.argsort(-y)[:5]].astype(np.float32))
    assert top.dtype == np.float32
    drawn = starting_points(features, y, 50, "random", np.random.default_rng(1))
    assert len({tuple(r) for r in drawn}) == 50  # without replacement: every row once
    again = starting_points(features, y, 50, "random", np.random.default_rng(1))
    np.testing.assert_array_equal(drawn, again)
    gaussian = starting_points(features, y, 7, "gaussian", np.random.default_rng(2))
    assert gaussian.shape == (7, 3) and gaussian.dtype == np.float32
    with pytest.raises(MatchoptError, match="cannot start 51 searches from 50"):
        starting_points(features, y, 51, "topk", rng)
    with pytest.raises(MatchoptError, match="unknown start"):
        starting_points(features, y, 5, "best", rng)


def test_sgd_takes_plain_gradient_steps():
    x0 = torch.tensor([[0.0, 1.0], [2.0, -1.0]], dtype=torch.float64)
    target = torch.tensor([1.0, 1.0], dtype=torch.float64)
    one = gradient_ascent(_concave(target), x0, steps=1, lr=0.1, optimizer="sgd")
    torch.testing.assert_close(one, x0 + 0.1 * 2 * (target - x0), rtol=0, atol=1e-15)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_ascent_climbs_to_the_maximum(optimizer):
    target = torch.tensor([1.5, -0.5, 2.0])
    x0 = torch.zeros(4, 3)
    lr = 0.05 if optimizer == "adam" else 0.1
    final = gradient_ascent(_concave(target), x0, steps=300, lr=lr, optimizer=optimizer)
    torch.testing.assert_close(final, target.expand(4, 3), rtol=0, atol=2e-2)
    assert torch.equal(x0, torch.zeros(4, 3))  # the starts are not modified


def test_rows_do_not_interact_and_the_surrogate_gets_no_gradient():
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def score(x):
        return model(x).squeeze(-1)

    starts = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    final = gradient_ascent(score, starts, steps=10, lr=0.1)
    moved = starts.clone()
    moved[2] += 1.0
    other = gradient_ascent(score, moved, steps=10, lr=0.1)
    keep = [0, 1, 3, 4]
    assert torch.equal(final[keep], other[keep])  # same shapes: bitwise
    assert all(p.grad is None for p in model.parameters())
    assert not final.requires_grad


def test_unknown_optimizer_is_a_clear_error():
    with pytest.raises(MatchoptError, match="unknown search optimizer"):
        gradient_ascent(_concave(torch.zeros(2)), torch.zeros(1, 2), 1, 0.1, optimizer="lbfgs")
