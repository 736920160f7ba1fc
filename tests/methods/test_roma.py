import numpy as np
import pytest
import torch

from matchopt.data import DesignSpace, OfflineData
from matchopt.methods.roma import (
    Roma,
    RomaConfig,
    adapt,
    normalized_step,
    perturbable,
    perturbed_training_step,
    search_loss,
)
from matchopt.models import GaussianMLP


def _model(d=3, seed=0):
    torch.manual_seed(seed)
    return GaussianMLP(d, (16, 16), "softplus")


def _batch(d=3, n=32, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, x.sum(1) + 0.1 * torch.randn(n, generator=g)


def test_perturbable_leaves_out_the_std_bounds():
    model = _model()
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names[id(p)] for p in perturbable(model)) == sorted(
        n for n, _ in model.named_parameters() if "log_std" not in n
    )


def test_normalized_step_moves_each_tensor_by_step_times_reference_norm():
    params = [torch.zeros(4), torch.zeros(2, 2)]
    grads = (torch.tensor([3.0, 4.0, 0.0, 0.0]), torch.tensor([[0.0, 2.0], [0.0, 0.0]]))
    normalized_step(params, grads, [torch.tensor(10.0), torch.tensor(1.0)], 0.1)
    torch.testing.assert_close(params[0], torch.tensor([0.6, 0.8, 0.0, 0.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(params[1], torch.tensor([[0.0, 0.1], [0.0, 0.0]]), atol=1e-6, rtol=0)


def test_without_perturbation_the_step_is_a_clipped_adam_step():
    x, y = _batch()
    model, reference = _model(), _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    perturbed_training_step(model, opt, x, y, inner_lr=0.0, perturb_steps=3, clip_norm=0.5)

    ref_opt = torch.optim.Adam(reference.parameters(), lr=1e-2)
    reference.nll(x, y).mean().backward()
    for p in reference.parameters():
        if p.grad.norm() > 0.5:
            p.grad *= 0.5 / p.grad.norm()
    ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)


def test_perturbation_raises_the_nll_and_the_update_uses_its_gradient():
    x, y = _batch()
    model, plain = _model(), _model()
    clean_nll = model.nll(x, y).mean().item()
    args = dict(perturb_steps=5, clip_norm=1.0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    perturbed_nll = perturbed_training_step(model, opt, x, y, inner_lr=0.05, **args)
    assert perturbed_nll > clean_nll
    plain_opt = torch.optim.SGD(plain.parameters(), lr=1e-2)
    perturbed_training_step(plain, plain_opt, x, y, inner_lr=0.0, **args)
    moved = [not torch.allclose(p, q) for p, q in zip(model.parameters(), plain.parameters())]
    assert any(moved)  # the gradient was taken at the perturbed weights
    # the applied step is lr * clipped gradient from the ORIGINAL weights: at most lr per tensor
    for p, q in zip(model.parameters(), _model().parameters()):
        assert (p - q).norm() <= 1e-2 + 1e-6


def test_adaptation_flattens_the_model_at_the_solutions_and_keeps_the_bounds():
    x, _ = _batch(n=16)
    model = _model()
    adapted = _model()
    with torch.no_grad():
        targets = model(x)[0]
    norms = [p.detach().norm() for p in perturbable(model)]

    def gradient_norm(m):
        xr = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(m(xr)[0].sum(), xr)
        return g.norm(dim=1).mean().item()

    before = gradient_norm(adapted)
    adapt(adapted, x, targets, norms, steps=20, inner_lr=0.05, nll_weight=1.0)
    assert gradient_norm(adapted) < before
    assert adapted.max_log_std.item() == model.max_log_std.item()
    assert adapted.min_log_std.item() == model.min_log_std.item()


def test_search_loss_on_a_hand_computed_case():
    model = _model(d=2)
    x = torch.randn(4, 2)
    mean = model(x)[0].detach()
    anchor = mean - 2.0  # (mu - anchor)^2 = 4
    loss = search_loss(model, x, anchor, region=4.0)
    assert loss.item() == pytest.approx((-mean + 4.0 / 8.0).sum().item(), rel=1e-5)


def test_no_updates_returns_the_top_designs():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 4)).astype(np.float32)
    y = rng.normal(size=300)
    config = RomaConfig(warmup_epochs=1, perturb_steps=2, updates=0)
    designs = Roma(config, seed=0).fit(OfflineData(x, y, DesignSpace.continuous(4))).propose(128)
    np.testing.assert_allclose(designs, x[np.argsort(-y)[:128]], rtol=1e-5, atol=1e-5)
