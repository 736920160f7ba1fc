"""The closed-form ReLU NTK against neural-tangents, closed-form cases and a wide network."""

import math

import pytest
import torch
from roundoff import ntk_gradient_roundoff, ntk_roundoff, ntk_scale

from matchopt.errors import MatchoptError
from matchopt.models import ntk
from matchopt.models.ntk import (
    ntk_regression_coefficients,
    relu_ntk,
    relu_ntk_diag,
    relu_ntk_gram,
)

# Every test here compares float kernels computed with other shapes or tiles.
pytestmark = pytest.mark.numerics

# Reference values computed with neural-tangents 0.6.5 (jax 0.4.23, jax_enable_x64) for BDI's
# kernel: stax.serial(Dense(1), Relu(), Dense(1), Relu(), Dense(1), Relu(), Dense(1), Relu(),
# Dense(1), Relu(), Dense(1)), get="ntk". Row 1 of X1 equals row 0 of X2 (a duplicate).
X1 = [
    [0.1257302210933933, -0.1321048632913019, 0.6404226504432821, 0.10490011715303971],
    [-0.535669373161111, 0.36159505490948474, 1.3040000451301372, 0.9470809631292422],
    [-0.7037352358069926, -1.2654214710460525, -0.6232744625373522, 0.0413259793472436],
]
X2 = [
    [-0.535669373161111, 0.36159505490948474, 1.3040000451301372, 0.9470809631292422],
    [-0.5442589828573099, -0.31630015636915454, 0.4116305363741328, 1.0425133694426776],
]
NT_KERNEL = [
    [0.02748387190094356, 0.01538865409579924],
    [0.14133145919526674, 0.05663507503317389],
    [0.0339620669625826, 0.03314573163531942],
]
NT_GRAM_X1 = [
    [0.02130023386785595, 0.02748387190094356, 0.01324610865650304],
    [0.02748387190094356, 0.14133145919526674, 0.0339620669625826],
    [0.01324610865650304, 0.0339620669625826, 0.11656470345566781],
]
# jax.grad of kernel_fn(x, X2, "ntk").sum() with respect to x at X1 (row 1 is a duplicate of a
# row of X2, where the library's square root has its zero-derivative convention).
NT_GRAD_X1 = [
    [-0.0176026862656074, 0.00115669074165178, 0.06350884653101578, 0.04352727534518668],
    [-0.04333831585546467, 0.00618240613225282, 0.07467987408070721, 0.07933159044356464],
    [-0.02609787683437689, -0.03471519226970704, -0.0066719016708867, 0.01582606153628538],
]
# stax.serial(Dense(1, W_std=1.5, b_std=0.3), Relu(), Dense(1, W_std=1.5, b_std=0.3)).
NT_DEPTH1_BIAS = [
    [1.2169066418317542, 0.6989934448375894],
    [4.108449398272202, 2.2386306319312106],
    [0.28525779678539004, 1.0676680071563733],
]


def tensor(values):
    return torch.tensor(values, dtype=torch.float64)


def test_matches_neural_tangents_values_and_gradient():
    # At x = x' the square root of q q' - Sigma^2 (zero in exact arithmetic) turns round-off of
    # order 1e-16 into relative differences of order 1e-8, in the library as here: the bound of
    # ntk_roundoff is sqrt(eps)-sized on duplicate pairs and near eps elsewhere. The references
    # carry their own round-off, hence twice the bound.
    x1, x2 = tensor(X1), tensor(X2)
    for a, b, reference in ((x1, x2, NT_KERNEL), (x1, x1, NT_GRAM_X1)):
        bound = ntk_roundoff(a, b, depth=5) * ntk_scale(relu_ntk_diag(a), relu_ntk_diag(b))
        assert ((relu_ntk(a, b) - tensor(reference)).abs() <= 2 * bound).all()
    x = x1.clone().requires_grad_(True)
    relu_ntk(x, x2).sum().backward()
    # Row 1 meets its duplicate: a sqrt(eps)-sized round-off, as for the values.
    torch.testing.assert_close(x.grad, tensor(NT_GRAD_X1), rtol=1e-6, atol=1e-12)
    # With a bias, Sigma is the dot product of the inputs augmented by (W x / sqrt(d), b).
    params = {"depth": 1, "weight_std": 1.5, "bias_std": 0.3}
    a, b = (
        torch.cat([1.5 * x / 2, torch.full((len(x), 1), 0.3, dtype=x.dtype)], 1) for x in (x1, x2)
    )
    bound = ntk_roundoff(a, b, depth=1) * ntk_scale(
        relu_ntk_diag(x1, **params), relu_ntk_diag(x2, **params)
    )
    assert ((relu_ntk(x1, x2, **params) - tensor(NT_DEPTH1_BIAS)).abs() <= 2 * bound).all()
    # Away from duplicates the agreement is to round-off (about 1e-14 here), not to 1e-8.
    off_diagonal = ~torch.eye(3, dtype=torch.bool)
    bound = ntk_roundoff(x1, x1, depth=5) * ntk_scale(relu_ntk_diag(x1), relu_ntk_diag(x1))
    assert bound[off_diagonal].max() < 1e-12
    error = (relu_ntk(x1, x1) - tensor(NT_GRAM_X1)).abs()
    assert (error[off_diagonal] <= 2 * bound[off_diagonal]).all()


def test_depth_one_closed_form_cases():
    # One hidden ReLU layer, W_std 1, no bias: Theta = Sigma_1 + Sigma_0 * (pi - angle) / (2 pi)
    # with Sigma_1 = sqrt(q q') (sin angle + (pi - angle) cos angle) / (2 pi).
    x = tensor([[3.0, 0.0, 4.0, 0.0]])  # q = 25 / 4
    orthogonal = tensor([[0.0, 2.0, 0.0, 0.0]])  # q' = 1
    at_45_degrees = tensor([[3.0, 5.0, 4.0, 0.0]])  # |.| = 5 sqrt 2, angle pi / 4
    assert relu_ntk(x, x, depth=1).item() == pytest.approx(25 / 4)  # q/2 + q/2
    assert relu_ntk(x, -x, depth=1).item() == pytest.approx(0.0, abs=1e-15)
    assert relu_ntk(x, orthogonal, depth=1).item() == pytest.approx(2.5 / (2 * math.pi))
    q, q2, angle = 25 / 4, 50 / 4, math.pi / 4
    sigma0 = math.sqrt(q * q2) * math.cos(angle)
    sigma1 = math.sqrt(q * q2) * (math.sin(angle) + (math.pi - angle) * math.cos(angle))
    expected = sigma1 / (2 * math.pi) + sigma0 * (math.pi - angle) / (2 * math.pi)
    assert relu_ntk(x, at_45_degrees, depth=1).item() == pytest.approx(expected, rel=1e-12)


def test_depth_zero_is_the_scaled_linear_kernel():
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    expected = 2.0**2 * x @ x.T / 3 + 0.5**2
    torch.testing.assert_close(relu_ntk(x, x, depth=0, weight_std=2.0, bias_std=0.5), expected)


def _empirical_ntk(x, depth, width, weight_std, bias_std, generator):
    """J J^T of one finite network in NTK parameterization, all parameters N(0, 1)."""
    dims = [x.shape[1], *([width] * depth), 1]
    params = []
    for fan_in, fan_out in zip(dims[:-1], dims[1:]):
        params.append(torch.randn(fan_in, fan_out, generator=generator, dtype=x.dtype))
        params.append(torch.randn(fan_out, generator=generator, dtype=x.dtype))
    for p in params:
        p.requires_grad_(True)
    h = x
    for layer in range(len(dims) - 1):
        weight, bias = params[2 * layer], params[2 * layer + 1]
        h = h @ weight * (weight_std / math.sqrt(dims[layer])) + bias_std * bias
        if layer < len(dims) - 2:
            h = torch.relu(h)
    rows = []
    for i in range(len(x)):
        grads = torch.autograd.grad(h[i, 0], params, retain_graph=True)
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    jacobian = torch.stack(rows)
    return jacobian @ jacobian.T


def test_wide_network_empirical_ntk_is_close():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, dtype=torch.float64, generator=generator)
    exact = relu_ntk(x, x, depth=2, weight_std=1.3, bias_std=0.2)
    empirical = sum(_empirical_ntk(x, 2, 2048, 1.3, 0.2, generator) for _ in range(2)) / 2
    # Finite-width fluctuations are a few percent here; the NNGP (no tangent terms) or a kernel
    # without the 1/d input scaling would be off by far more.
    assert ((empirical - exact).abs().max() / exact.abs().max()).item() < 0.12


def test_gram_is_symmetric_positive_semidefinite_with_the_diagonal_recursion():
    x = torch.randn(40, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    gram = relu_ntk(x, x)
    # K_ij and K_ji come from different GEMM entries: equal up to the kernel's round-off.
    bound = ntk_roundoff(x, x, depth=5) * ntk_scale(relu_ntk_diag(x), relu_ntk_diag(x))
    assert ((gram - gram.T).abs() <= 2 * bound).all()
    assert torch.linalg.eigvalsh(gram).min().item() > -1e-12 * gram.diagonal().max().item()
    # The general formula at x = x' carries round-off of order 1e-8 (see above).
    torch.testing.assert_close(relu_ntk_diag(x), gram.diagonal(), rtol=1e-7, atol=0)


def test_tiles_give_the_untiled_kernel_gram_and_gradients(monkeypatch):
    generator = torch.Generator().manual_seed(4)
    x1 = torch.randn(23, 5, dtype=torch.float64, generator=generator, requires_grad=True)
    x2 = torch.randn(31, 5, dtype=torch.float64, generator=generator, requires_grad=True)
    weights = torch.randn(23, 31, dtype=torch.float64, generator=generator)
    whole = relu_ntk(x1, x2)  # a single tile at the default tile shape
    grads_whole = torch.autograd.grad((whole * weights).sum(), (x1, x2))
    gram_whole = relu_ntk_gram(x2.detach())
    monkeypatch.setattr(ntk, "TILE_ROWS", 7)
    monkeypatch.setattr(ntk, "TILE_COLUMNS", 5)
    tiled = relu_ntk(x1, x2)
    # Tiles change the GEMM shapes, hence the summation order: both sides carry round-off.
    a, b = x1.detach(), x2.detach()
    bound = ntk_roundoff(a, b, depth=5) * ntk_scale(relu_ntk_diag(a), relu_ntk_diag(b))
    assert ((tiled - whole).abs() <= 2 * bound).all()
    grads_tiled = torch.autograd.grad((tiled * weights).sum(), (x1, x2))
    gradient_bound = ntk_gradient_roundoff(a, b, depth=5)
    for tiled_grad, whole_grad in zip(grads_tiled, grads_whole):
        scale = whole_grad.abs().max()
        assert ((tiled_grad - whole_grad).abs() <= 2 * gradient_bound * scale).all()
    gram_tiled = relu_ntk_gram(b)
    upper = torch.triu(torch.ones(31, 31, dtype=torch.bool))
    # The diagonal pairs each row with itself: the cancellation leaves sqrt(eps)-sized round-off.
    bound = ntk_roundoff(b, b, depth=5) * ntk_scale(relu_ntk_diag(b), relu_ntk_diag(b))
    assert ((gram_tiled - gram_whole).abs()[upper] <= 2 * bound[upper]).all()
    assert gram_tiled[20, :14].abs().sum() == 0  # row 20's band (rows 14-20) starts at column 14


def test_gradients_are_exact_away_from_the_diagonal_and_finite_on_it():
    generator = torch.Generator().manual_seed(2)
    x1 = torch.randn(3, 4, dtype=torch.float64, generator=generator, requires_grad=True)
    x2 = torch.randn(2, 4, dtype=torch.float64, generator=generator, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: relu_ntk(a, b, depth=3), (x1, x2))
    assert torch.autograd.gradcheck(lambda a: relu_ntk_diag(a, depth=3), (x1,))
    same = x1.detach().clone().requires_grad_(True)
    relu_ntk(same, x1.detach()).sum().backward()
    assert torch.isfinite(same.grad).all()


def test_regression_coefficients_solve_the_regularized_system():
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(30, 5, dtype=torch.float64, generator=generator)
    y = torch.randn(30, dtype=torch.float64, generator=generator)
    gram = relu_ntk(x, x)
    regularized = gram + 1e-3 * gram.trace() / 30 * torch.eye(30, dtype=torch.float64)
    expected = torch.linalg.solve(regularized, y)
    got = ntk_regression_coefficients(x, y, regularization=1e-3)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


def test_regression_reports_a_singular_kernel():
    x = torch.ones(3, 2, dtype=torch.float64)  # identical rows: rank one
    with pytest.raises(MatchoptError, match="not positive definite"):
        ntk_regression_coefficients(x, torch.zeros(3, dtype=torch.float64), regularization=0.0)
