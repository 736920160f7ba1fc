import dataclasses

import numpy as np
import pytest
import torch
from roundoff import ntk_roundoff

from matchopt.data import DesignSpace, OfflineData
from matchopt.errors import MatchoptError
from matchopt.methods import make_method
from matchopt.methods.bdi import (
    BDI,
    BDIConfig,
    backward_loss,
    backward_weights,
    bidirectional_loss,
    forward_loss,
    kernel_rows,
)
from matchopt.models.ntk import relu_ntk
from matchopt.search import gradient_ascent


def test_losses_on_a_hand_computed_case():
    k_hx = torch.tensor([[1.0, 2.0]], dtype=torch.float64)  # one design, two offline rows
    coefficients = torch.tensor([0.5, 1.0], dtype=torch.float64)
    # forward: prediction 1 * 0.5 + 2 * 1 = 2.5 -> 1/2 (2.5 - 10)^2
    assert forward_loss(k_hx, coefficients, 10.0).item() == pytest.approx(28.125)
    # backward: K(x_h, x_h) = 4, so the design predicts 10 / 4 * [1, 2] = [2.5, 5] for y = [1, 2]
    y = torch.tensor([1.0, 2.0], dtype=torch.float64)
    weights = torch.tensor([0.5, 0.5], dtype=torch.float64)
    independent = backward_loss(k_hx, torch.tensor([4.0], dtype=torch.float64), y, weights, 10.0)
    assert independent.shape == (1,)
    assert independent.item() == pytest.approx(0.5 * (0.5 * 1.5**2 + 0.5 * 3.0**2))
    joint = backward_loss(k_hx, torch.tensor([[4.0]], dtype=torch.float64), y, weights, 10.0)
    assert joint.item() == pytest.approx(independent.item())


def test_backward_weights():
    y = torch.tensor([0.0, 1.0, 3.0], dtype=torch.float64)
    torch.testing.assert_close(backward_weights(y, 0.0), torch.full_like(y, 1 / 3))
    sharp = backward_weights(y, 50.0)
    assert sharp.sum().item() == pytest.approx(1.0)
    assert sharp[2].item() > 0.999


def test_kernel_rows():
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(kernel_rows(10, None, rng), np.arange(10))
    np.testing.assert_array_equal(kernel_rows(10, 10, rng), np.arange(10))
    rows = kernel_rows(100, 30, np.random.default_rng(5))
    assert len(rows) == 30 and len(np.unique(rows)) == 30 and np.all(np.diff(rows) > 0)
    np.testing.assert_array_equal(rows, kernel_rows(100, 30, np.random.default_rng(5)))
    with pytest.raises(MatchoptError, match="max_rows"):
        kernel_rows(10, 0, rng)


def _problem(n_rows=60, dim=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n_rows, dim, dtype=torch.float64, generator=generator)
    y = x[:, 0] - x[:, 1] ** 2 + 0.1 * torch.randn(n_rows, dtype=torch.float64, generator=generator)
    gram = relu_ntk(x, x)
    coefficients = torch.linalg.solve(gram + 1e-3 * torch.eye(n_rows, dtype=torch.float64), y)
    return x, y, coefficients, backward_weights(y, 0.5)


@pytest.mark.numerics
@pytest.mark.parametrize("loss", ["both", "forward", "backward"])
def test_designs_are_optimized_independently(loss):
    # The public code runs one Adam per design; a batch under one Adam must give the same result.
    x, y, coefficients, weights = _problem()
    config = BDIConfig(loss=loss, coupling="independent")
    starts = x[torch.argsort(y, descending=True)[:3]]

    def score(designs):
        return -bidirectional_loss(designs, x, y, coefficients, weights, config)

    steps, lr = 5, 0.1
    batch = gradient_ascent(score, starts, steps=steps, lr=lr)
    assert not torch.allclose(batch, starts)
    # Exact: moving one design's start leaves every other design bit for bit where it was (same
    # shapes, so the same kernels and summation order on both sides).
    moved = starts.clone()
    moved[1] += 0.5
    other = gradient_ascent(score, moved, steps=steps, lr=lr)
    assert torch.equal(other[[0, 2]], batch[[0, 2]])
    assert not torch.equal(other[1], batch[1])
    # Alone, a design meets other GEMM shapes. The starts are offline rows, so the kernel pairs
    # each design with its own duplicate, where round-off is sqrt(eps)-sized (ntk_roundoff); an
    # Adam step moves a design by at most about lr, in a direction off by that relative amount.
    duplicate = ntk_roundoff(starts[:1], starts[:1], depth=config.depth).item()
    for i in range(3):
        alone = gradient_ascent(score, starts[i : i + 1], steps=steps, lr=lr)
        assert ((batch[i : i + 1] - alone).abs() <= 2 * steps * lr * duplicate).all()


def test_joint_coupling_of_one_design_is_the_independent_loss():
    x, y, coefficients, weights = _problem()
    design = x[:1] + 0.3
    joint = bidirectional_loss(design, x, y, coefficients, weights, BDIConfig(coupling="joint"))
    single = bidirectional_loss(design, x, y, coefficients, weights, BDIConfig())
    assert joint.item() == pytest.approx(single.item(), rel=1e-6)


def test_the_forward_model_interpolates_the_data_and_the_search_raises_its_prediction():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 3)).astype(np.float32)
    y = (x[:, 0] - (x[:, 1:] ** 2).sum(1)).astype(np.float64)
    data = OfflineData(x, y, DesignSpace.continuous(3))
    config = dataclasses.replace(BDIConfig(), regularization=1e-9, search_lr=0.05, search_steps=50)
    method = BDI(config, seed=0).fit(data)
    np.testing.assert_allclose(method.predict(x), y, rtol=1e-3, atol=1e-3)
    designs = method.propose(8)
    assert designs.shape == (8, 3) and designs.dtype == np.float32
    starts = x[np.argsort(-y)[:8]]
    assert method.predict(designs).mean() > method.predict(starts).mean()


def test_large_offline_sets_use_a_seeded_subset():
    task_rows = 300
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 4, size=(task_rows, 6))
    data = OfflineData(tokens, rng.normal(size=task_rows), DesignSpace.discrete(6, 4))
    method = make_method("bdi", "quick", {"max_rows": 100, "search_steps": 2}, seed=3).fit(data)
    assert len(method.rows_) == 100 and method.kernel_x_.shape == (100, 18)
    torch.testing.assert_close(method.weights_, torch.full((100,), 0.01, dtype=torch.float64))
    again = make_method("bdi", "quick", {"max_rows": 100, "search_steps": 2}, seed=3).fit(data)
    np.testing.assert_array_equal(method.rows_, again.rows_)
    designs = method.propose(128)
    assert designs.shape == (128, 6) and designs.dtype == np.int64


def test_bdi_refuses_an_mps_device_before_building_its_kernel(monkeypatch):
    """MPS has no float64, which the kernel regression needs: a clear error, not a torch one."""
    import torch

    from matchopt.methods.bdi import BDI
    from matchopt.tasks import load_task

    monkeypatch.setattr(BDI, "device_", property(lambda self: torch.device("mps")))
    with pytest.raises(MatchoptError, match="float64, which MPS devices lack"):
        BDI(seed=0).fit(load_task("potts").offline)
