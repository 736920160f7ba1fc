import numpy as np
import pytest
import torch
from roundoff import SAFETY, dot_roundoff

from matchopt.data import DesignSpace, OfflineData
from matchopt.methods.mins import (
    ConditionalMLP,
    Mins,
    MinsConfig,
    critic_loss,
    generator_loss,
    gumbel_softmax,
)
from matchopt.models.stacked import SeedDraws, SeedStack


class LinearCritic(torch.nn.Module):
    """D(x, y) = a . x + y, whose input gradient is a everywhere."""

    def __init__(self, a):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(a))

    def forward(self, x, y):
        return (x @ self.a + y)[:, None]


def test_critic_and_generator_losses_by_hand():
    critic = LinearCritic([3.0, 4.0])  # |grad| = 5: penalty (1 - 5)^2 = 16 on every row
    x_real = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    x_fake = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    y = torch.tensor([0.5, -1.0])  # cancels between D(fake) and D(real)
    w = torch.tensor([2.0, 1.0])
    loss = critic_loss(critic, x_real, x_fake, y, w, 10.0, torch.Generator().manual_seed(0))
    # row 1: D(fake) - D(real) = 0 - 3 = -3; row 2: 7 - 4 = 3; + 10 * 16 each.
    expected = (2.0 * (-3 + 160) + 1.0 * (3 + 160)) / 2
    assert loss.item() == pytest.approx(expected)
    # generator: -mean(w * D(fake)) = -(2 * (0 + 0.5) + 1 * (7 - 1)) / 2
    assert generator_loss(critic, x_fake, y, w).item() == pytest.approx(-3.5)


def test_gradient_penalty_vanishes_for_unit_gradients():
    critic = LinearCritic([0.6, 0.8])
    x = torch.randn(4, 2)
    zero_w = critic_loss(critic, x, x, torch.zeros(4), torch.ones(4), 10.0, torch.Generator())
    assert zero_w.item() == pytest.approx(0.0, abs=1e-6)


def test_gumbel_softmax():
    gen = torch.Generator().manual_seed(0)
    log_probs = torch.log(torch.tensor([0.1, 0.2, 0.7])).expand(20000, 3)
    relaxed = gumbel_softmax(log_probs, 1.0, gen)
    torch.testing.assert_close(relaxed.sum(-1), torch.ones(20000))
    # At a temperature near 0 the sample is (nearly always) one-hot and follows the
    # probabilities (Gumbel-max).
    hard = gumbel_softmax(log_probs, 1e-3, gen)
    assert (hard.max(-1).values > 0.99).float().mean() > 0.99
    frequencies = hard.argmax(-1).bincount(minlength=3) / 20000
    torch.testing.assert_close(frequencies, torch.tensor([0.1, 0.2, 0.7]), atol=0.015, rtol=0)


def test_y_reaches_every_layer():
    net = ConditionalMLP(in_features=5, out_features=2, hidden=(8, 8, 8), embedding=8)
    assert [layer.in_features for layer in net.layers] == [5 + 8, 8 + 8, 8 + 8]
    assert net.output.in_features == 8 + 8
    h = torch.randn(3, 5)
    assert not torch.allclose(net(h, torch.zeros(3)), net(h, torch.ones(3)))


def test_discrete_designs_are_tokens_from_the_generator():
    rng = np.random.default_rng(0)
    space = DesignSpace.discrete(4, 3)
    data = OfflineData(rng.integers(0, 3, size=(300, 4)), rng.normal(size=300), space)
    method = Mins(MinsConfig(hidden=(16, 16, 16), embedding=16, epochs=2), seed=0).fit(data)
    # Real rows as the critic sees them: relaxed one-hot, each token a distribution over 3.
    onehot = torch.eye(3)[torch.from_numpy(data.x)].view(300, -1)
    draws = SeedDraws([torch.Generator().manual_seed(0)], torch.device("cpu"), batched=False)
    real = method._relax_real(onehot, 5.0, draws)
    torch.testing.assert_close(real.view(300, 4, 3).sum(-1), torch.ones(300, 4))
    designs = method.propose(50)
    assert designs.dtype == np.int64 and designs.shape == (50, 4)
    assert designs.min() >= 0 and designs.max() < 3


@pytest.mark.numerics
def test_a_batched_mins_step_has_each_seeds_gradients_within_roundoff():
    from matchopt.methods.mins import ConditionalMLP, generator_loss, wgan_gp_loss

    generator = torch.Generator().manual_seed(3)
    critics = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        critics.append(ConditionalMLP(5, 1, (16, 16), 8))
    stack = SeedStack(critics)
    x_real, x_fake = (
        torch.randn(2, 12, 5, generator=generator),
        torch.randn(2, 12, 5, generator=generator),
    )
    y, w = torch.randn(2, 12, generator=generator), torch.rand(2, 12, generator=generator)
    e = torch.rand(2, 12, 1, generator=generator)
    losses = wgan_gp_loss(stack, x_real, x_fake, y, w, 10.0, e)
    (losses.sum() + generator_loss(stack, x_fake, y, w).sum()).backward()
    for k, critic in enumerate(critics):
        alone = wgan_gp_loss(critic, x_real[k], x_fake[k], y[k], w[k], 10.0, e[k])
        (alone + generator_loss(critic, x_fake[k], y[k], w[k])).backward()
        assert losses[k].item() == pytest.approx(alone.item(), rel=1e-5)
        for p, stacked in zip(critic.parameters(), stack.stacked):
            # Three layers of at most 24 terms, a double backward, 36 rows summed.
            bound = SAFETY * 8 * dot_roundoff(24 * 36, torch.float32)
            assert (stacked.grad[k] - p.grad).abs().max() <= bound * p.grad.abs().max()
