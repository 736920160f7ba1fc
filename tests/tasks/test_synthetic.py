"""The synthetic tasks (matchopt.tasks.synthetic): Styblinski-Tang's gradient, the Potts chain's
exact optimum."""

import numpy as np
import pytest

from matchopt.tasks.synthetic import ChainPotts, StyblinskiTang


def test_styblinski_tang_gradient_matches_finite_differences():
    x = np.random.default_rng(0).uniform(-4, 4, size=(5, 10))
    eps = 1e-6
    f = StyblinskiTang.function
    numeric = np.stack([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(10)], axis=1)
    np.testing.assert_allclose(StyblinskiTang.gradient(x), numeric, rtol=1e-5, atol=1e-5)
    best = np.full((1, 10), StyblinskiTang.optimum_x)
    assert StyblinskiTang.function(best)[0] == pytest.approx(StyblinskiTang.optimum_value)
    # BoTorch's function and autograd agree with the closed forms (float64 round-off: terms of
    # size x^4 <= 256, summed over 10 coordinates).
    x = np.random.default_rng(1).uniform(-6, 6, size=(50, 10))
    closed = -0.5 * np.sum(x**4 - 16 * x**2 + 5 * x, axis=1)
    np.testing.assert_allclose(StyblinskiTang.function(x), closed, rtol=0, atol=1e-11)
    closed_gradient = -0.5 * (4 * x**3 - 32 * x + 5)
    np.testing.assert_allclose(StyblinskiTang.gradient(x), closed_gradient, rtol=0, atol=1e-11)


def test_potts_optimum_is_exact():
    task = ChainPotts()
    sequence, value = task.optimum()
    assert task.function(sequence[None])[0] == pytest.approx(value)
    # No single-site change improves it, and no random sequence beats it.
    for i in range(12):
        for k in range(4):
            other = sequence.copy()
            other[i] = k
            assert task.function(other[None])[0] <= value + 1e-12
    samples = np.random.default_rng(5).integers(0, 4, size=(20000, 12))
    assert task.function(samples).max() <= value
