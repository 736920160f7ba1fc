import math

import numpy as np
import pytest
import torch

from matchopt.data import DesignSpace, OfflineData
from matchopt.methods.coms import Coms, ComsConfig, ascend, conservative_losses
from matchopt.models import mlp_layers


def linear_model(w, b=0.0):
    model = torch.nn.Linear(len(w), 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([w]))
        model.bias.fill_(b)
    return model


def test_ascent_moves_along_the_gradient_and_leaves_the_model_alone():
    model = linear_model([1.0, -2.0])
    x = torch.zeros(3, 2)
    out = ascend(model, x, steps=4, step_size=0.5)
    torch.testing.assert_close(out, torch.tensor([[2.0, -4.0]] * 3))  # 4 * 0.5 * grad
    assert not out.requires_grad
    assert all(p.grad is None and p.requires_grad for p in model.parameters())


def test_conservative_losses_on_a_hand_computed_case():
    model = linear_model([1.0, 1.0], b=0.5)  # f(x) = x1 + x2 + 0.5
    log_alpha = torch.nn.Parameter(torch.tensor(math.log(0.1)))
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    y = torch.tensor([0.0, 2.0])
    x_neg = torch.tensor([[1.0, 1.0], [1.0, 3.0]])
    # f(x) = [0.5, 1.5], f(x-) = [2.5, 4.5]: overestimation [2, 3], squared errors [0.25, 0.25]
    model_loss, alpha_loss, over = conservative_losses(model, log_alpha, x, y, x_neg, tau=2.0)
    assert model_loss.item() == pytest.approx(0.25 + 0.1 * 2.5)
    assert alpha_loss.item() == pytest.approx(0.1 * 2.0 - 0.1 * 2.5)
    assert over.item() == pytest.approx(2.5)

    # the model loss trains only the model, the multiplier loss only log alpha
    (model_loss + alpha_loss).backward()
    assert log_alpha.grad.item() == pytest.approx(0.1 * (2.0 - 2.5))  # d/dlog a of a*(tau - over)
    # d model_loss / d w = mean(2 (f(x)-y) x + alpha (x- - x)) with alpha constant
    expected = (2 * 0.5 * x[0] + 2 * -0.5 * x[1] + 0.1 * (x_neg - x).sum(0)) / 2
    torch.testing.assert_close(model.weight.grad[0], expected)


def test_alpha_grows_while_the_model_overestimates():
    torch.manual_seed(0)
    model = mlp_layers(3, (8,), 1, "relu")
    log_alpha = torch.nn.Parameter(torch.tensor(math.log(0.1)))
    x = torch.randn(16, 3)
    x_neg = ascend(model, x, steps=20, step_size=1.0)
    _, alpha_loss, over = conservative_losses(model, log_alpha, x, torch.zeros(16), x_neg, 0.0)
    assert over.item() > 0  # ascent points are predicted higher
    alpha_loss.backward()
    assert log_alpha.grad.item() < 0  # so gradient descent raises alpha


def _fitted(space, x, y, **overrides):
    config = ComsConfig(hidden=(8,), epochs=0, **overrides)
    return Coms(config, seed=0).fit(OfflineData(x, y, space))


def test_defaults_follow_the_design_type():
    rng = np.random.default_rng(0)
    discrete = _fitted(
        DesignSpace.discrete(5, 4), rng.integers(0, 4, (200, 5)), rng.normal(size=200)
    )
    assert discrete.encoder_.x_scaler_ is None  # logits, not z-scored
    assert discrete.step_size_ == pytest.approx(2.0 * math.sqrt(15))
    continuous = _fitted(DesignSpace.continuous(4), rng.normal(size=(200, 4)), rng.normal(size=200))
    assert continuous.encoder_.x_scaler_ is not None
    assert continuous.step_size_ == pytest.approx(0.05 * math.sqrt(4))
    forced = _fitted(
        DesignSpace.continuous(4),
        rng.normal(size=(200, 4)),
        rng.normal(size=200),
        particle_lr=1.0,
        normalize_x=False,
    )
    assert forced.encoder_.x_scaler_ is None
    assert forced.step_size_ == pytest.approx(2.0)


def test_no_search_steps_returns_the_top_designs():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 4)).astype(np.float32)
    y = rng.normal(size=300)
    method = _fitted(DesignSpace.continuous(4), x, y, search_steps=0)
    designs = method.propose(128)
    np.testing.assert_allclose(designs, x[np.argsort(-y)[:128]], rtol=1e-5, atol=1e-5)
