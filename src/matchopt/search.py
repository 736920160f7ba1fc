"""Search over a differentiable surrogate: starting points and gradient ascent.

Everything here works on normalized feature tensors (n x d); methods decode the result.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from matchopt.data import top_rows
from matchopt.errors import MatchoptError

START_CHOICES = ("topk", "random", "gaussian")


def starting_points(
    features: np.ndarray, y: np.ndarray, n: int, how: str, rng: np.random.Generator
) -> np.ndarray:
    """Pick ``n`` starting points (n x d) for a search.

    Args:
        features: normalized offline designs (N x d).
        y: their scores (N,).
        n: how many points.
        how: ``"topk"`` the n best offline designs (the paper's choice); ``"random"`` n offline
            designs drawn uniformly without replacement; ``"gaussian"`` n draws of N(0, I) in the
            normalized space (what the public MATCH-OPT script does on TF-Bind-8).
        rng: source of randomness for ``"random"`` and ``"gaussian"``.
    """
    if how == "gaussian":
        return rng.standard_normal((n, features.shape[1])).astype(np.float32)
    if n > len(features):
        raise MatchoptError(f"cannot start {n} searches from {len(features)} offline designs")
    if how == "topk":
        index = top_rows(y, n)
    elif how == "random":
        index = rng.choice(len(features), size=n, replace=False)
    else:
        raise MatchoptError(f"unknown start {how!r}; choose one of {', '.join(START_CHOICES)}")
    return np.asarray(features[index], dtype=np.float32)


def gradient_ascent(
    score: Callable[[torch.Tensor], torch.Tensor],
    x0: torch.Tensor,
    steps: int,
    lr: float,
    optimizer: str = "adam",
) -> torch.Tensor:
    """Maximize ``score`` (n x d -> n) from each row of ``x0`` independently.

    Rows do not interact, so ascending ``score(x).sum()`` moves every row along its own gradient.

    Args:
        score: differentiable surrogate, maps n x d to n scores.
        x0: starting points (n x d).
        steps: number of updates.
        lr: step size.
        optimizer: ``"adam"`` (torch.optim.Adam on x, as MATCH-OPT) or ``"sgd"``
            (plain steps ``x += lr * grad``, as design-baselines' gradient ascent).

    Returns:
        The final points (n x d), detached.
    """
    x = x0.detach().clone().requires_grad_(True)
    if optimizer == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam([x], lr=lr)
    elif optimizer == "sgd":
        opt = torch.optim.SGD([x], lr=lr)
    else:
        raise MatchoptError(f"unknown search optimizer {optimizer!r}; choose 'adam' or 'sgd'")
    for _ in range(steps):
        # Differentiate with respect to x only: the surrogate's parameters get no gradient.
        (x.grad,) = torch.autograd.grad(-score(x).sum(), x)
        opt.step()
    return x.detach()


def gradient_ascent_path(
    score: Callable[[torch.Tensor], torch.Tensor],
    x0: torch.Tensor,
    steps: int,
    lr: float,
    every: int = 1,
    low: torch.Tensor | None = None,
    high: torch.Tensor | None = None,
    radius: float | None = None,
    radius_l2: float | None = None,
) -> torch.Tensor:
    """Adam ascent of ``score`` from each row of ``x0``, keeping the points along the way.

    The same updates as :func:`gradient_ascent` with ``optimizer="adam"``; with ``low`` and
    ``high`` (d,), every point is projected into that box after each step, and with
    ``radius``, then into the ball of that root-mean-square distance per coordinate around its
    start (a trust region: ``||x - x0|| <= radius * sqrt(d)``); with ``radius_l2``, then into
    the ball of that Euclidean distance around its start (``||x - x0|| <= radius_l2``, whatever
    the dimension).

    Returns:
        (m x n x d) points, detached: ``x0`` first, then the points after every ``every``
        steps, and the final point (after ``steps`` steps) last.
    """
    if every < 1:
        raise MatchoptError(f"every must be >= 1, got {every}")
    x = x0.detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=lr)
    points = [x0.detach().clone()]
    for step in range(1, steps + 1):
        (x.grad,) = torch.autograd.grad(-score(x).sum(), x)
        opt.step()
        with torch.no_grad():
            if low is not None or high is not None:
                x.clamp_(low, high)
            if radius is not None:
                shift = x - x0
                rms = shift.pow(2).mean(-1, keepdim=True).sqrt()
                x.copy_(x0 + shift * (radius / rms.clamp_min(radius)))
            if radius_l2 is not None:
                # Only points outside the ball move, so that a bound that never binds changes
                # nothing, not even by rounding.
                shift = x - x0
                norm = shift.norm(dim=-1, keepdim=True)
                outside = norm > radius_l2
                x.copy_(torch.where(outside, x0 + shift * (radius_l2 / norm), x))
        if step % every == 0 or step == steps:
            points.append(x.detach().clone())
    return torch.stack(points)
