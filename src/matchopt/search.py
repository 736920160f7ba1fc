"""Search over a differentiable surrogate: starting points and gradient ascent.

Everything here works on normalized feature tensors (n x d); methods decode the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

import numpy as np
import torch

from matchopt.data import top_rows
from matchopt.errors import MatchoptError

START_CHOICES = ("topk", "random", "gaussian")
#: Starts that are offline rows: a search from them returns at most one design per row.
ROW_STARTS = ("topk", "random")


def search_start(default: str = "topk") -> Any:
    """A config field naming where a search starts (:data:`START_CHOICES`), declared as such in
    its metadata, so that :meth:`~matchopt.methods.Method.proposal_cap` finds it by what it is,
    not by its name."""
    return field(default=default, metadata={"choices": START_CHOICES, "search_start": True})


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
    bar: Any = None,
) -> torch.Tensor:
    """Adam ascent of ``score`` from each row of ``x0``, keeping the points along the way.

    The same updates as :func:`gradient_ascent` with ``optimizer="adam"``; with ``low`` and
    ``high`` (d,), every point is projected into that box after each step, and with
    ``radius``, then into the ball of that root-mean-square distance per coordinate around its
    start (a trust region: ``||x - x0|| <= radius * sqrt(d)``); with ``radius_l2``, then into
    the ball of that Euclidean distance around its start (``||x - x0|| <= radius_l2``, whatever
    the dimension). ``bar`` (a tqdm bar, optional) advances by one every step.

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
        if bar is not None:
            bar.update(1)
    return torch.stack(points)


def box_widths(offline: np.ndarray) -> np.ndarray:
    """Per-feature width (k,) of the box flattened offline designs (N x k) span; a feature the
    rows hold constant gets width 1 (two designs differ there by their raw difference)."""
    offline = np.asarray(offline, dtype=np.float64)
    width = offline.max(axis=0) - offline.min(axis=0)
    return np.where(width > 0, width, 1.0)


def scaled_distances(a: np.ndarray, b: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Root-mean-square difference per feature, in units of the box's widths, between every row
    of ``a`` (n x k) and of ``b`` (m x k): an (n x m) matrix. Two designs closer than a small
    value of it (``min_distance``) are one design to a lab."""
    a, b = np.asarray(a, np.float64) / widths, np.asarray(b, np.float64) / widths
    center = b.mean(0) if len(b) else 0.0  # columns far from zero lose the differences otherwise
    a, b = a - center, b - center
    squared = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.sqrt(np.maximum(squared, 0.0) / a.shape[1])


def near_copy_pairs(designs: np.ndarray, widths: np.ndarray, min_distance: float) -> int:
    """Pairs of designs (n x k, flattened) closer than ``min_distance``
    (:func:`scaled_distances`)."""
    designs = np.asarray(designs).reshape(len(designs), -1)
    close = scaled_distances(designs, designs, widths) < min_distance
    return int(np.triu(close, k=1).sum())


def select_per_path(
    candidates: np.ndarray,
    scores: np.ndarray,
    paths: np.ndarray,
    offline: np.ndarray,
    n: int,
    min_distance: float = 0.0,
    keep_apart: np.ndarray | None = None,
) -> np.ndarray:
    """Indices of ``n`` candidates, best score first: one per path, distinct, none offline.

    Greedy over candidates by decreasing score: a candidate is taken if its path has no design
    yet, the design is new (not an offline row, not taken) and, with ``min_distance`` > 0, it
    lies at least that far from every design taken (:func:`scaled_distances`, in units of the
    offline box's widths). If that gives fewer than ``n``, the next passes drop the one-per-path
    rule, then the offline rule; designs stay distinct where the candidates allow, else the best
    ones repeat.

    Args:
        candidates: (m x k) flattened designs.
        scores: (m,) their scores (higher is better).
        paths: (m,) the path each candidate lies on.
        offline: (N x k) flattened offline designs.
        n: how many to pick.
        min_distance: the smallest distance between two designs taken (0: any distinct ones).
        keep_apart: (j x k) designs taken elsewhere (another search's) that the picks must also
            stay ``min_distance`` from.
    """
    offline_keys = {row.tobytes() for row in np.ascontiguousarray(offline, candidates.dtype)}
    keys = [row.tobytes() for row in np.ascontiguousarray(candidates)]
    widths = box_widths(offline) if min_distance > 0 else None
    apart = np.zeros((0, candidates.shape[1])) if keep_apart is None else keep_apart
    order = np.argsort(-scores, kind="stable")
    picked: list[int] = []
    taken_keys: set[bytes] = set()
    used_paths: set[int] = set()
    for one_per_path, new_only in ((True, True), (False, True), (False, False)):
        for index in order:
            if len(picked) == n:
                return np.asarray(picked)
            key = keys[index]
            if key in taken_keys or (new_only and key in offline_keys):
                continue
            if new_only and scores[index] == -np.inf:  # outside the trust region
                continue
            if one_per_path and paths[index] in used_paths:
                continue
            if widths is not None and (picked or len(apart)):
                others = np.concatenate([apart, candidates[picked]])
                if scaled_distances(candidates[index : index + 1], others, widths).min() < (
                    min_distance
                ):
                    continue
            picked.append(int(index))
            taken_keys.add(key)
            used_paths.add(int(paths[index]))
    if not picked:
        raise MatchoptError("no candidate design to propose")
    # Fewer distinct candidates than designs asked: repeat them, best first.
    return np.resize(np.asarray(picked), n)
