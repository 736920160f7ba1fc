"""Seeds stacked as a batch dimension (matchopt.models.stacked): each seed's module gets its output
and gradient within round-off (tests/roundoff.py); modules of different shapes are refused."""

from __future__ import annotations

import pytest
import torch
from roundoff import SAFETY, dot_roundoff

from matchopt.errors import MatchoptError
from matchopt.methods.ddom import ScoreNet
from matchopt.models.stacked import SeedStack


@pytest.mark.numerics
def test_a_stack_gives_each_seeds_module_its_output_and_gradient_within_roundoff():
    generator = torch.Generator().manual_seed(0)
    nets = []
    for seed in range(3):
        torch.manual_seed(seed)
        nets.append(ScoreNet(6, (32, 16)))
    stack = SeedStack(nets)
    x = torch.randn(3, 20, 6, generator=generator)
    t, y = torch.rand(3, 20, generator=generator), torch.randn(3, 20, generator=generator)
    out = stack(x, t, y)
    out.pow(2).sum(-1).mean(-1).sum().backward()
    for k, net in enumerate(nets):
        alone = net(x[k], t[k], y[k])
        alone.pow(2).sum(-1).mean().backward()
        # Each output is a chain of dot products of at most 32 terms (8 = 6 features + t + y).
        bound = SAFETY * 3 * dot_roundoff(32, torch.float32)
        scale = alone.abs().max()
        assert (out[k] - alone).abs().max() <= bound * scale
        for (name, p), stacked in zip(net.named_parameters(), stack.stacked):
            grad_scale = p.grad.abs().max().clamp_min(1e-30)
            # The loss sums 20 rows on top: a longer reduction.
            assert (stacked.grad[k] - p.grad).abs().max() <= SAFETY * 4 * dot_roundoff(
                32 * 20, torch.float32
            ) * grad_scale, name


def test_a_stack_refuses_modules_of_different_shapes():
    with pytest.raises(MatchoptError, match="one architecture"):
        SeedStack([ScoreNet(4, (8,)), ScoreNet(4, (9,))])
    with pytest.raises(MatchoptError, match="without buffers"):
        SeedStack([torch.nn.BatchNorm1d(3)])
