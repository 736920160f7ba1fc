import math

import numpy as np
import pytest
import torch

from matchopt.methods.ddom import VPSDE, denoising_loss, reverse_drift, sample, vp_marginal

SDE = VPSDE(beta_min=0.01, beta_max=2.0, horizon=1.0)


def test_vp_marginal_by_hand():
    mean, std = vp_marginal(SDE, torch.tensor([0.0, 1.0]))
    # int_0^1 beta = 0.01 + 1.99 / 2 = 1.005
    torch.testing.assert_close(mean, torch.tensor([1.0, math.exp(-0.5025)]))
    torch.testing.assert_close(std, torch.tensor([0.0, math.sqrt(1 - math.exp(-1.005))]))
    t = torch.linspace(0, 1, 11)
    mean, std = vp_marginal(SDE, t)
    torch.testing.assert_close(mean**2 + std**2, torch.ones(11))  # variance preserving


class OracleNet(torch.nn.Module):
    """Returns a fixed output, whatever the inputs."""

    def __init__(self, out):
        super().__init__()
        self.out = out

    def forward(self, x, t, y):
        return self.out


def test_denoising_loss_by_hand():
    torch.manual_seed(0)
    x0, eps = torch.randn(5, 3), torch.randn(5, 3)
    t = torch.tensor([0.1, 0.3, 0.5, 0.7, 1.0])
    w = torch.tensor([1.0, 2.0, 0.5, 0.0, 1.0])
    y = torch.zeros(5)
    _, std = vp_marginal(SDE, t)
    # The minimizer a = -g eps / s gives zero loss ...
    best = OracleNet(-(SDE.g(t) / std)[:, None] * eps)
    assert denoising_loss(best, SDE, x0, y, w, t, eps).item() == pytest.approx(0.0, abs=1e-6)
    # ... and a = 0 gives mean_i w_i |eps_i|^2 / 2.
    zero = OracleNet(torch.zeros(5, 3))
    expected = float((w * (eps**2).sum(1) / 2).mean())
    assert denoising_loss(zero, SDE, x0, y, w, t, eps).item() == pytest.approx(expected)


def test_guidance_in_the_drift():
    # a(x, t, y) = y for every coordinate: guided a = (1 + gamma) y - gamma * 0.
    net = OracleNet(None)
    net.forward = lambda x, t, y: y[:, None].expand(len(y), 2)
    x = torch.tensor([[1.0, -1.0], [0.5, 2.0]])
    y = torch.tensor([0.3, -0.7])
    drift = reverse_drift(net, SDE, x, 0.4, y, guidance=2.0)
    beta = 0.01 + 1.99 * 0.4
    expected = math.sqrt(beta) * 3.0 * y[:, None] + 0.5 * beta * x
    torch.testing.assert_close(drift, expected.expand(2, 2))


class GaussianScore(torch.nn.Module):
    """Exact g(t) * score of x_t when x_0 ~ N(mu, sigma^2 I) (ignores y)."""

    def __init__(self, mu, sigma):
        super().__init__()
        self.mu, self.sigma = mu, sigma

    def forward(self, x, t, y):
        mean, std = vp_marginal(SDE, t)
        var = (mean * self.sigma) ** 2 + std**2
        score = -(x - mean[:, None] * self.mu) / var[:, None]
        return SDE.g(t)[:, None] * score


@pytest.mark.parametrize("method", ["heun", "ddom-script"])
def test_sampler_matches_the_exact_reverse_process(method):
    # Data x_0 ~ N(mu, sigma^2 I) and the exact g * score: the reverse SDE realizes the true
    # conditional x_0 | x_T = N(mu + c (x_T - m mu), sigma^2 - c m sigma^2), with m = m(T),
    # v = m^2 sigma^2 + s(T)^2 and c = m sigma^2 / v. The sampler starts from N(0, I) instead
    # of N(m mu, v) (beta_max = 2 leaves m(1) = 0.6), so it must end at
    # mean mu (1 - c m) and variance c^2 + sigma^2 - c m sigma^2.
    mu, sigma = torch.tensor([2.0, -1.0]), 0.5
    m, s = (float(v) for v in vp_marginal(SDE, torch.tensor(1.0)))
    c = m * sigma**2 / (m**2 * sigma**2 + s**2)
    rng = np.random.default_rng(0)
    x = sample(GaussianScore(mu, sigma), SDE, torch.zeros(4000), 2, 100, 2.0, rng, method)
    torch.testing.assert_close(x.mean(0), mu * (1 - c * m), atol=0.03, rtol=0)
    expected_std = math.sqrt(c**2 + sigma**2 - c * m * sigma**2)  # 0.512
    np.testing.assert_allclose(x.std(0).numpy(), expected_std, atol=0.02)
