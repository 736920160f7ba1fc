"""MATCH-OPT: surrogates trained to match the gradient field of the data.

Hoang, Fadhel, Deshwal, Doppa, Hoang. "Learning Surrogates for Offline Black-Box Optimization via
Gradient Matching", ICML 2024.

Read top to bottom:

1. **Trajectories** (Sec. 4, practical considerations): sort the offline data by y, cut it into
   128 rank buckets; each epoch draws ``n // 128`` trajectories with one point per bucket, so
   every trajectory climbs in y. One trajectory is one optimizer step.
2. **Loss** (eq. 13 + eq. 14): for consecutive points (x, x') of a trajectory, the line integral
   ``dz = dx^T int_0^1 grad g(x + t dx) dt`` is matched by the surrogate, with the integral
   approximated by a quadrature rule (trapezoid with kappa = 5 intervals in the paper), plus
   ``alpha`` times the mean squared error of the surrogate values (the value regularizer).
3. **Search**: 150 Adam steps on the inputs from the 128 best offline designs.

Speed. The public script obtains per-example input gradients from a full batch Jacobian, which
costs O(batch^2) backward passes. Rows do not interact, so all input gradients of a step come
from one reverse pass. :func:`gradient_matching_loss` is that readable autograd form (one
``autograd.grad`` of the summed outputs, then ``backward``). :func:`fused_loss_and_gradients`
gives the same loss and parameter gradients in closed form for the LeakyReLU MLP of the paper:
the activation's derivative is a constant mask, so the input gradient is a product of weights
and masks, and its gradient with respect to the weights needs no second-order autograd graph.
It also shares the trajectory points between neighbouring pairs, uses that the first layer is
linear along a segment, and back-propagates the value term through the 128 trajectory rows only.
Tests check both forms agree.

Deviations from the public script (listed in docs/matchopt.md):
* quadrature: trapezoid (paper eq. 13) by default; ``left-riemann`` reproduces the script.
* starts: top-128 offline designs (paper) by default; the script starts TF-Bind-8 searches from
  N(0, I) in the normalized space (``init="gaussian"``).
* the script searches every 20 epochs and reports all; we search once after the last epoch
  (choosing an epoch by oracle score would leak the oracle).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
from tqdm.auto import tqdm

from matchopt.checkpoints import LoopSnapshots, is_finite_number, is_integer, is_number, shown
from matchopt.config_fields import by_design_type, count, learning_rate, scale, share, widths
from matchopt.data import OfflineData, design_groups
from matchopt.encodings import DesignEncoder
from matchopt.errors import MatchoptError
from matchopt.methods.base import MIN_ROWS, search_starts
from matchopt.methods.engine import TrainingRun
from matchopt.methods.training import Resumable
from matchopt.methods.wrappers import check_fitted, fit_all_or_nothing, in_default_threads
from matchopt.models.mlp import MLP
from matchopt.models.optim import adam
from matchopt.runtime import seeded_torch_rng
from matchopt.search import gradient_ascent, search_start
from matchopt.validation import (
    SELECTIONS,
    SPLITS,
    CheckpointSelector,
    Validator,
    evaluation_rows,
    holdout_rows,
)


@dataclass(frozen=True)
class GradientMatchingConfig:
    """How a gradient-matching surrogate is trained; defaults are the paper's (Appendix C).
    Shared by MATCH-OPT and the MATCH-OPT ensemble."""

    hidden: tuple[int, ...] = widths((512, 128, 32))
    """Hidden layer widths of the MLP surrogate."""
    negative_slope: float = 0.3
    """LeakyReLU slope (the public script's 0.3)."""
    trajectory_length: int = count(128, minimum=2)
    """Number of rank buckets = points per trajectory = the script's batch size."""
    epochs: int = count(200)
    """Training epochs; each draws n // trajectory_length trajectories."""
    lr: float = learning_rate(1e-4)
    """Adam learning rate of the surrogate."""
    quadrature: str = field(
        default="trapezoid",
        metadata={"choices": ("trapezoid", "midpoint", "left-riemann", "exact")},
    )
    """Line-integral rule: trapezoid (eq. 13), midpoint (one node inside each interval),
    left-riemann (public script), exact (g(x')-g(x))."""
    kappa: int = field(default=5, metadata={"range": (1, 1000)})
    """Number of quadrature intervals on each segment (its memory grows with it: at most 1000)."""
    alpha: float = field(default=1.0, metadata={"range": (0.0, 1e6)})
    """Weight of the value regularizer (eq. 14); 0 is the paper's no-regularizer ablation (a
    negative weight would reward a surrogate for missing the values)."""


@dataclass(frozen=True)
class MatchOptConfig(GradientMatchingConfig):
    """MATCH-OPT hyperparameters; defaults are the paper's (Appendix C)."""

    search_steps: int = count(150, minimum=0)
    """Adam steps on the designs."""
    search_lr: float | None = learning_rate(None)
    """Search step size; None = 0.01 for discrete designs (logits), 0.001 for continuous ones."""
    search_lr_scale: float = scale(1.0)
    """Multiplies the search step size (``search_lr`` or its default); 1 = the paper."""
    init: str = search_start()
    """Search starts: topk (paper), random offline rows, or gaussian N(0, I) (script, TF-Bind)."""
    backend: str = field(default="fused", metadata={"choices": ("fused", "autograd")})
    """How the loss gradient is computed: closed form (fused) or autograd; both are exact."""
    validation_fraction: float = share(0.0, 0.5)
    """Share of offline rows held out of training to score checkpoints; 0 = none (the paper)."""
    validation_split: str = field(default="random", metadata={"choices": SPLITS})
    """Held-out rows: random (stratified by rank) or top (the highest y; extrapolation)."""
    validation_every: int = count(1)
    """Score the surrogate on the held-out rows after every this many epochs (and the last)."""
    selection: str = field(default="last", metadata={"choices": SELECTIONS})
    """Checkpoint kept: last (the paper) or the best evaluated epoch by this validation metric."""
    refit: bool = False
    """After selecting epoch E on the split, train a new surrogate on all rows for E epochs."""


QUICK = {"hidden": (64, 32, 16), "epochs": 4, "search_steps": 20, "trajectory_length": 32}
#: The validated preset: the paper's training and search, plus the checkpoint rule frozen from
#: ``matchopt study checkpoint-selection`` on the development tasks (potts, styblinski-tang,
#: hopper-local; docs/studies.md: checkpoint selection) before any TF-Bind-8 run: 10% of the rows
#: held out (random, stratified by rank), scored every 10 epochs, the epoch of least held-out MSE
#: kept.
#: Second version: the search step x 4, frozen from ``matchopt study search-step`` on the same
#: development tasks (docs/studies.md: search step) before the second TF-Bind-8 run.
VALIDATED = {
    "validation_fraction": 0.1,
    "validation_split": "random",
    "validation_every": 10,
    "selection": "mse",
    "search_lr_scale": 4.0,
}
#: At most this many held-out trajectories enter the validation matching loss: it needs input
#: gradients, and more would make validation cost more than a few percent of training.
VALIDATION_TRAJECTORIES = 8


# --- 1. Monotonic trajectories -----------------------------------------------------------------


def rank_buckets(y: np.ndarray, n_buckets: int) -> list[np.ndarray]:
    """Row indices cut into ``n_buckets`` equal rank buckets, lowest y first.

    Every bucket holds ``len(y) // n_buckets`` rows; the last one also takes the remainder.
    """
    if len(y) < n_buckets:
        raise MatchoptError(
            f"MATCH-OPT needs at least trajectory_length={n_buckets} rows, got {len(y)}; "
            "lower trajectory_length"
        )
    order = np.argsort(y, kind="stable")
    size = len(y) // n_buckets
    return [order[i * size : (i + 1) * size] for i in range(n_buckets - 1)] + [
        order[(n_buckets - 1) * size :]
    ]


def sample_trajectories(buckets: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """One epoch of trajectories: (n_trajectories x n_buckets) row indices, y increasing.

    Each bucket is permuted and its first ``size`` rows are used (size = smallest bucket), so
    trajectory i takes the i-th draw of every bucket.
    """
    size = min(len(b) for b in buckets)
    return np.stack([rng.permutation(b)[:size] for b in buckets], axis=1)


# --- 2. Gradient-matching loss -----------------------------------------------------------------


@dataclass(frozen=True)
class QuadratureRule:
    """Weights of ``int_0^1 f(t) dt ~ w0 f(0) + w1 f(1) + sum_j c_j f(t_j)`` (0 < t_j < 1)."""

    start_weight: float
    end_weight: float
    interior_t: tuple[float, ...]
    interior_weights: tuple[float, ...]


def quadrature_rule(name: str, kappa: int) -> QuadratureRule | None:
    """The rule for ``name`` with ``kappa`` intervals; ``None`` for the exact integral.

    trapezoid (paper eq. 13): ``1/(2 kappa) sum_u [f((u-1)/kappa) + f(u/kappa)]``.
    midpoint: ``1/kappa sum_u f((u - 1/2)/kappa)``: kappa nodes, none at a segment's ends, with
    half the trapezoid's error for twice-differentiable f (and the opposite sign).
    left-riemann (public script): ``1/kappa sum_{u=0}^{kappa-1} f(u/kappa)``.
    """
    if kappa < 1:
        raise MatchoptError(f"kappa must be >= 1, got {kappa}")
    if name == "midpoint":
        middles = tuple((u - 0.5) / kappa for u in range(1, kappa + 1))
        return QuadratureRule(0.0, 0.0, middles, tuple(1.0 / kappa for _ in middles))
    interior_t = tuple(j / kappa for j in range(1, kappa))
    interior_w = tuple(1.0 / kappa for _ in interior_t)
    if name == "trapezoid":
        return QuadratureRule(0.5 / kappa, 0.5 / kappa, interior_t, interior_w)
    if name == "left-riemann":
        return QuadratureRule(1.0 / kappa, 0.0, interior_t, interior_w)
    if name == "exact":
        return None
    raise MatchoptError(f"unknown quadrature {name!r}")


def line_integral_estimates(
    model: torch.nn.Module, x: torch.Tensor, rule: QuadratureRule | None
) -> torch.Tensor:
    """Estimates of ``dx^T int_0^1 grad g_phi(x_i + t dx) dt`` for consecutive rows of ``x``.

    Args:
        model: the surrogate g_phi (n x d -> n).
        x: a trajectory (T x d).
        rule: quadrature rule, or ``None`` for the exact value ``g_phi(x_{i+1}) - g_phi(x_i)``.

    Returns:
        (T-1,) estimates, differentiable with respect to the model parameters.
    """
    if rule is None:
        values = model(x)
        return values[1:] - values[:-1]
    dx = x[1:] - x[:-1]
    t = torch.tensor((0.0, *rule.interior_t, 1.0), dtype=x.dtype, device=x.device)
    w = torch.tensor(
        (rule.start_weight, *rule.interior_weights, rule.end_weight),
        dtype=x.dtype,
        device=x.device,
    )
    nodes = (x[:-1, None, :] + t[None, :, None] * dx[:, None, :]).detach().requires_grad_(True)
    values = model(nodes.reshape(-1, x.shape[1]))
    # Rows are independent, so one backward of the sum gives every node's input gradient.
    (grads,) = torch.autograd.grad(values.sum(), nodes, create_graph=True)
    return ((grads * dx[:, None, :]).sum(-1) * w).sum(-1)


def listnet_loss(values: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """ListNet's top-one loss (Cao et al., ICML 2007; the ranking surrogate of RaM, ICLR 2025):
    cross-entropy between ``softmax(y)`` and ``softmax(values)`` over one list (a trajectory)."""
    return -(torch.softmax(y, 0) * torch.log_softmax(values, 0)).sum()


def gradient_matching_loss(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    rule: QuadratureRule | None,
    alpha: float,
    rank_weight: float = 0.0,
) -> torch.Tensor:
    """Paper eq. 14 on one trajectory: mean over pairs of ``(dz - estimate)^2``
    + ``alpha * mean((g_phi(x) - y)^2)``, + ``rank_weight`` times :func:`listnet_loss` of the
    trajectory's values (0 in the paper).

    Args:
        model: the surrogate.
        x: trajectory points (T x d), y increasing.
        y: their normalized scores (T,).
        rule: quadrature rule (``None`` = exact).
        alpha: weight of the value regularizer.
        rank_weight: weight of the ListNet ranking term.
    """
    matching = (line_integral_estimates(model, x, rule) - (y[1:] - y[:-1])).pow(2).mean()
    if alpha == 0 and rank_weight == 0:
        return matching
    values = model(x)
    loss = matching + alpha * (values - y).pow(2).mean()
    return loss + rank_weight * listnet_loss(values, y) if rank_weight else loss


def _leaky_relu_derivative(a: torch.Tensor, slope: float) -> torch.Tensor:
    """1 where a > 0, else ``slope`` (autograd's convention at 0).

    Uses the kernel autograd itself uses: on CPU it is several times faster than ``a > 0``
    followed by a conversion or ``torch.where``.
    """
    ones = torch.ones((), dtype=a.dtype, device=a.device).expand_as(a)
    return torch.ops.aten.leaky_relu_backward(ones, a, slope, False)


@torch.no_grad()
def _hidden_forward(
    layers: list[torch.nn.Linear], a: torch.Tensor, slope: float
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The hidden activations ``h_l = m_l * a_l`` and LeakyReLU masks ``m_l`` of every layer,
    from the first layer's pre-activations ``a``."""
    acts: list[torch.Tensor] = []
    masks: list[torch.Tensor] = []
    for index, layer in enumerate(layers):
        if index > 0:
            a = torch.addmm(layer.bias, acts[-1], layer.weight.T)
        mask = _leaky_relu_derivative(a, slope)
        masks.append(mask)
        acts.append(a * mask)
    return acts, masks


def _input_gradients(
    layers: list[torch.nn.Linear], head: torch.nn.Linear, masks: list[torch.Tensor]
) -> list[torch.Tensor]:
    """``g[l]``: the output's gradient with respect to ``a_{l+1}`` for every row."""
    g = [head.weight * masks[-1]]
    for index in range(len(layers) - 1, 0, -1):
        g.insert(0, (g[0] @ layers[index].weight) * masks[index - 1])
    return g


def _add_value_gradients(
    grads: dict[torch.Tensor, torch.Tensor],
    layers: list[torch.nn.Linear],
    head: torch.nn.Linear,
    acts: list[torch.Tensor],
    masks: list[torch.Tensor],
    x: torch.Tensor,
    d_values: torch.Tensor,
) -> None:
    """Add to ``grads`` an ordinary MLP backward pass of ``d_values`` (the loss's derivative
    with respect to the values at the trajectory rows ``x``)."""
    n_points = len(x)
    grads[head.weight] += d_values[None, :] @ acts[-1][:n_points]
    grads[head.bias] += d_values.sum()
    d_a = d_values[:, None] * head.weight * masks[-1][:n_points]
    for index in range(len(layers) - 1, -1, -1):
        inputs = acts[index - 1][:n_points] if index > 0 else x
        grads[layers[index].weight] += d_a.T @ inputs
        grads[layers[index].bias] += d_a.sum(0)
        if index > 0:
            d_a = (d_a @ layers[index].weight) * masks[index - 1][:n_points]


@torch.no_grad()  # gradients in closed form: recording an autograd graph is pure overhead
def fused_loss_and_gradients(
    model: MLP,
    x: torch.Tensor,
    y: torch.Tensor,
    rule: QuadratureRule,
    alpha: float,
    rank_weight: float = 0.0,
) -> torch.Tensor:
    """Same loss as :func:`gradient_matching_loss` for an :class:`MLP`, gradients in closed form.

    Writes the parameter gradients into ``p.grad`` and returns the loss value (a 0-dim tensor on
    the model's device: reading it is the caller's choice, a host sync on a GPU).

    Notation: hidden layers l = 1..L with pre-activations a_l, activations h_l = m_l * a_l where
    m_l is the LeakyReLU derivative mask (constant almost everywhere), output w_o h_L + b_o.
    The gradient of the output with respect to a_1 is
    ``g_1 = (((w_o * m_L) W_L) * m_{L-1} ... W_2) * m_1`` and the directional derivative along
    a segment dx is ``g_1 . (W_1 dx)``. Along a segment, a_1 is linear in t, so interior nodes
    need no first-layer product; neighbouring pairs share their trajectory point.
    """
    layers, head = list(model.hidden), model.output
    n_points = x.shape[0]
    forward = _fused_forward(model, x, rule)
    residual = forward.estimates - (y[1:] - y[:-1])
    value_residual = forward.values - y
    loss = residual.pow(2).mean() + alpha * value_residual.pow(2).mean()
    if rank_weight:
        log_p_values = torch.log_softmax(forward.values, 0)
        p_y = torch.softmax(y, 0)
        loss = loss - rank_weight * (p_y * log_p_values).sum()

    grads = {p: torch.zeros_like(p) for p in model.parameters()}
    _add_matching_gradients(grads, layers, head, forward, rule, 2.0 * residual / (n_points - 1))
    # Backward of the value term: an ordinary MLP backward pass on the trajectory rows.
    if alpha != 0 or rank_weight:
        d_values = 2.0 * alpha * value_residual / n_points
        if rank_weight:  # ListNet: d/dv of -sum p_y log softmax(v) is softmax(v) - p_y
            d_values = d_values + rank_weight * (log_p_values.exp() - p_y)
        _add_value_gradients(grads, layers, head, forward.acts, forward.masks, x, d_values)
    for p, grad in grads.items():
        p.grad = grad
    return loss.detach()


class _FusedForward(NamedTuple):
    """What :func:`fused_loss_and_gradients`'s forward pass keeps for its backward pass."""

    dx: torch.Tensor  # trajectory segments (P x d)
    u: torch.Tensor  # first-layer image of each segment (P x H1)
    inner_w: torch.Tensor  # quadrature weights of the interior nodes
    acts: list[torch.Tensor]  # hidden activations of every row (points, then interior nodes)
    masks: list[torch.Tensor]  # their LeakyReLU derivative masks
    first_row: int  # the first row whose input gradient the rule weighs (0 or the interior's)
    g: list[torch.Tensor]  # input gradients of rows first_row on: g[l] w.r.t. a_{l+1}
    integral: torch.Tensor  # the quadrature of g_1 along each segment (P x H1)
    values: torch.Tensor  # the model's values at the trajectory points
    estimates: torch.Tensor  # the line-integral estimates of y's differences (P,)


def _fused_forward(model: MLP, x: torch.Tensor, rule: QuadratureRule) -> _FusedForward:
    """The forward pass of :func:`fused_loss_and_gradients`: trajectory rows first, then the
    interior quadrature nodes of every pair; the input gradients and the line integrals."""
    layers, head, slope = list(model.hidden), model.output, model.negative_slope
    n_points, n_pairs, n_inner = x.shape[0], x.shape[0] - 1, len(rule.interior_t)
    dx = x[1:] - x[:-1]
    inner_t = torch.tensor(rule.interior_t, dtype=x.dtype, device=x.device)
    inner_w = torch.tensor(rule.interior_weights, dtype=x.dtype, device=x.device)

    first = layers[0]
    a_points = torch.addmm(first.bias, x, first.weight.T)
    u = dx @ first.weight.T  # first-layer image of each segment, (P x H1)
    a_inner = a_points[:-1, None, :] + inner_t[None, :, None] * u[:, None, :]
    a = (
        torch.cat([a_points, a_inner.reshape(n_pairs * n_inner, a_points.shape[1])])
        if n_inner
        else a_points
    )
    acts, masks = _hidden_forward(layers, a, slope)
    values = (acts[-1][:n_points] @ head.weight[0]) + head.bias

    # Input gradients with respect to a_1 (g[l] is the gradient w.r.t. a_{l+1}), of every row,
    # or of the interior nodes only when the rule gives the segments' ends no weight.
    first_row = n_points if rule.start_weight == rule.end_weight == 0 else 0
    g = _input_gradients(layers, head, [mask[first_row:] for mask in masks])
    g1 = g[0]
    g1_inner = g1[n_points - first_row :].view(n_pairs, n_inner, g1.shape[1])
    integral = torch.zeros_like(u)
    if not first_row:
        integral = rule.start_weight * g1[:n_pairs] + rule.end_weight * g1[1:n_points]
    if n_inner:  # kappa = 1 has no interior node (and adding zeros would change nothing)
        integral = integral + torch.einsum("pkh,k->ph", g1_inner, inner_w)
    estimates = (integral * u).sum(-1)
    return _FusedForward(dx, u, inner_w, acts, masks, first_row, g, integral, values, estimates)


def _add_matching_gradients(
    grads: dict[torch.Tensor, torch.Tensor],
    layers: list[torch.nn.Linear],
    head: torch.nn.Linear,
    forward: _FusedForward,
    rule: QuadratureRule,
    d_est: torch.Tensor,
) -> None:
    """Add to ``grads`` the backward pass of the matching term, given its derivative ``d_est``
    with respect to the estimates (the masks are constant: only the weights in g and u
    matter)."""
    g1 = forward.g[0]
    n_pairs = len(d_est)
    n_points = n_pairs + 1
    d_integral = d_est[:, None] * forward.u
    d_g = torch.zeros_like(g1)
    if not forward.first_row:
        d_g[:n_pairs] += rule.start_weight * d_integral
        d_g[1:n_points] += rule.end_weight * d_integral
    d_g[n_points - forward.first_row :] = (
        d_integral[:, None, :] * forward.inner_w[None, :, None]
    ).reshape(-1, g1.shape[1])
    masks = [mask[forward.first_row :] for mask in forward.masks]
    grads[layers[0].weight] += (d_est[:, None] * forward.integral).T @ forward.dx
    for index in range(len(layers) - 1):
        q = d_g * masks[index]  # gradient w.r.t. g[index + 1] @ W_{index + 2}
        grads[layers[index + 1].weight] += forward.g[index + 1].T @ q
        d_g = q @ layers[index + 1].weight.T
    grads[head.weight] += (d_g * masks[-1]).sum(0, keepdim=True)


# --- 3. The method -----------------------------------------------------------------------------


def _saved_values_problem(
    values: dict,
    epoch: int,
    epochs: int,
    every: int,
    model: torch.nn.Module,
    validator: Validator | None,
    selector: CheckpointSelector | None,
) -> str | None:
    """What keeps the values of a training snapshot after ``epoch`` of ``epochs`` epochs from
    resuming :meth:`MatchOpt._train_loop` (scored every ``every`` epochs and after the last), or
    None: the validation history (one dict of numbers per evaluation so far), its seconds and
    the selector's state."""
    evaluations = 0
    if validator is not None:
        evaluations = epoch // every + (1 if epoch == epochs and epoch % every else 0)
    history = values.get("history")
    if not isinstance(history, list) or len(history) != evaluations:
        return f"snapshot history {shown(history)} is not a list of {evaluations} evaluations"
    for row in history:
        if (
            not isinstance(row, dict)
            or not is_integer(row.get("epoch"))
            or not all(isinstance(k, str) and is_number(v) for k, v in row.items())
        ):
            return f"snapshot history entry {shown(row)} is not an evaluation"
    seconds = values.get("validation_seconds")
    if not is_finite_number(seconds) or seconds < 0:
        return f"snapshot validation time {shown(seconds)} is not a number of seconds >= 0"
    saved = values.get("selector")
    if selector is None:
        if not isinstance(saved, dict) or saved:
            return f"snapshot selector {shown(saved)} is not empty"
        return None
    return selector.state_problem(saved, model, epoch, evaluations)


def _training_step(
    model: MLP,
    optimizer: torch.optim.Optimizer,
    rule: Any,
    alpha: float,
    rank_weight: float,
    fused: bool,
    x: torch.Tensor,
    y_path: torch.Tensor,
) -> torch.Tensor:
    """One optimizer step of Algorithm 1 on one trajectory (eq. 13 plus eq. 14's regularizer);
    returns the loss."""
    if fused:
        loss = fused_loss_and_gradients(model, x, y_path, rule, alpha, rank_weight)
    else:
        optimizer.zero_grad()
        loss = gradient_matching_loss(model, x, y_path, rule, alpha, rank_weight)
        loss.backward()
    optimizer.step()
    return loss


def _epoch_loss(
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    features: torch.Tensor,
    scores: torch.Tensor,
    trajectories: torch.Tensor,
) -> float:
    """One epoch: ``step`` on every trajectory (rows of ``trajectories``); the mean loss."""
    # Summed on the device in float64, in the order a Python float would sum them (the same
    # value), read once an epoch: no host sync per step.
    total = torch.zeros((), dtype=torch.float64, device=features.device)
    for x, y_path in zip(features[trajectories], scores[trajectories]):
        total += step(x, y_path).detach().double()
    return total.item() / len(trajectories)


class MatchOpt(Resumable):
    """MATCH-OPT (Hoang et al., ICML 2024): gradient-matching surrogate + gradient ascent.

    Args:
        config: :class:`MatchOptConfig` (paper defaults when ``None``).
        seed: seeds the surrogate's initialization, the trajectories and random starts.
        progress: show a training progress bar on stderr.

    Attributes:
        model_: the trained :class:`MLP` (on normalized features and scores).
        encoder_: maps designs to normalized features and back.
        losses_: mean training loss of every epoch.
        selected_epoch_: the epoch whose parameters ``model_`` holds (``epochs`` under ``last``).
        validator_: the :class:`~matchopt.validation.Validator` (history of every metric), or
            None without validation.
        checkpoints_: parameters at every validated epoch (``fit(keep_checkpoints=True)`` only).
    """

    config_class = MatchOptConfig
    presets = {
        "paper": {},
        "quick": QUICK,
        "validated": VALIDATED,
        "validated-quick": {**QUICK, **VALIDATED},
    }

    @fit_all_or_nothing
    def fit(self, data: OfflineData, keep_checkpoints: bool = False) -> MatchOpt:
        """Train the surrogate (Algorithm 1), with hold-out validation if configured.

        Args:
            data: the offline designs and scores.
            keep_checkpoints: keep the parameters of every validated epoch in ``checkpoints_``
                (for :mod:`matchopt.studies.checkpoint_selection`).
        """
        config = self.config_
        for name in ("selection", "refit"):
            value = getattr(config, name)
            if value not in ("last", False) and config.validation_fraction <= 0:
                raise MatchoptError(
                    f"{name}={value!r} needs held-out rows: set validation_fraction > 0"
                )
        self.encoder_ = DesignEncoder(data.space).fit(data.x, data.y)
        features = torch.from_numpy(self.encoder_.encode_x(data.x)).to(self.device_)
        scores = torch.from_numpy(self.encoder_.encode_y(data.y)).to(self.device_)
        train_rows = np.arange(len(data))
        validator, selector = None, CheckpointSelector(config.selection, keep_checkpoints)
        if config.validation_fraction > 0:
            # Replicated rows of one design stay on one side (a held-out design is unseen).
            train_rows, held_rows = holdout_rows(
                data.y,
                config.validation_fraction,
                config.validation_split,
                self.seed,
                groups=design_groups(data.x),
            )
            validator = self._validator(features, scores, data.y, train_rows, held_rows)
        self.validation_seconds_ = 0.0
        started = time.perf_counter()
        model = self._train_loop(
            features, scores, data, train_rows, config.epochs, validator, selector
        )
        self.train_seconds_ = time.perf_counter() - started - self.validation_seconds_
        self.selected_epoch_ = config.epochs
        if validator is not None and config.selection != "last":
            self.selected_epoch_ = selector.restore(model)
        if validator is not None and config.refit:
            # Held-out rows chose the epoch count (or only measured the curves, with "last"):
            # train again on every row for that many epochs.
            all_rows = np.arange(len(data))
            model = self._train_loop(
                features, scores, data, all_rows, self.selected_epoch_, stage="refit"
            )
        self.validator_ = validator
        self.checkpoints_ = selector.checkpoints
        model.eval()
        self.model_ = model
        self.data_ = data
        return self

    def _train_loop(
        self,
        features: torch.Tensor,
        scores: torch.Tensor,
        data: OfflineData,
        rows: np.ndarray,
        epochs: int,
        validator: Validator | None = None,
        selector: CheckpointSelector | None = None,
        stage: str = "main",
        seed: int | None = None,
        rank_weight: float = 0.0,
        bar: tqdm | None = None,
    ) -> MLP:
        """Algorithm 1 on the offline ``rows`` for ``epochs`` epochs; returns the surrogate.

        With a validator, the surrogate is scored after every ``validation_every`` epochs and
        after the last, and ``selector`` sees each score. With a snapshot file in the run
        context, the loop saves its state at the end of an epoch when one is due and starts from
        a saved state of this run (``stage`` tells the main training from the refit, or ensemble
        members apart). ``seed`` (default: the method's) seeds the initialization and the
        trajectories; ``rank_weight`` adds :func:`listnet_loss` (0 in the paper). ``bar``: a
        progress bar that counts this loop's epochs among others' (an ensemble's one bar); by
        default the loop has its own.
        """
        config = self.config_
        seed = self.seed if seed is None else seed
        rule = quadrature_rule(config.quadrature, config.kappa)
        buckets = [rows[b] for b in rank_buckets(data.y[rows], config.trajectory_length)]
        rng = np.random.default_rng(seed)
        with seeded_torch_rng(seed):
            model = MLP(features.shape[1], config.hidden, config.negative_slope)
        model.to(features.device)
        optimizer = adam(model.parameters(), lr=config.lr)
        fused = config.backend == "fused" and rule is not None

        self.losses_: list[float] = []
        parts = {"model": model, "optimizer": optimizer, "rng": rng}
        snapshots = TrainingRun.of([self]).snapshots(data, stage, **parts)
        steps = min(map(len, buckets))  # optimizer steps an epoch takes: one per path
        start = self._resume(snapshots, epochs, model, validator, selector, steps)
        own_bar = bar is None
        bar = self._epoch_bar(start, epochs) if own_bar else bar
        if not own_bar:
            bar.update(start)  # epochs a killed run had done
        step = functools.partial(
            _training_step, model, optimizer, rule, config.alpha, rank_weight, fused
        )
        for epoch in range(start, epochs):
            trajectories = torch.from_numpy(sample_trajectories(buckets, rng)).to(features.device)
            self.losses_.append(_epoch_loss(step, features, scores, trajectories))
            bar.set_postfix(loss=f"{self.losses_[-1]:.4f}", refresh=False)
            bar.update(1)
            self._end_epoch(snapshots, epoch + 1, epochs, model, validator, selector)
        if own_bar:
            bar.close()
        return model

    def _resume(
        self,
        snapshots: LoopSnapshots,
        epochs: int,
        model: MLP,
        validator: Validator | None,
        selector: CheckpointSelector | None,
        steps_per_epoch: int,
    ) -> int:
        """Restore a loop of :meth:`_train_loop` from a snapshot of this run, if there is one
        (losses, validation history and seconds, the selector's state); the first epoch to
        train."""
        config = self.config_

        def check(values: dict, epoch: int) -> str | None:
            # What the loop restores beyond its parts and losses, checked before anything is
            # (an ensemble's members have no validation: its config has no validation_every).
            every = config.validation_every if validator is not None else 1
            return _saved_values_problem(values, epoch, epochs, every, model, validator, selector)

        start = snapshots.start(self.losses_, epochs, check, steps_per_epoch)
        saved = snapshots.saved
        if saved and validator is not None:
            validator.history[:] = saved["history"]
            self.validation_seconds_ = float(saved["validation_seconds"])
        if saved and selector is not None:
            selector.load_state(saved["selector"])
        return start

    def _end_epoch(
        self,
        snapshots: LoopSnapshots,
        done: int,
        epochs: int,
        model: MLP,
        validator: Validator | None,
        selector: CheckpointSelector | None,
    ) -> None:
        """After epoch ``done`` of :meth:`_train_loop`: the validation score when one is due
        (every ``validation_every`` epochs and after the last), then a snapshot when due."""
        config = self.config_
        if validator is not None and (done % config.validation_every == 0 or done == epochs):
            started = time.perf_counter()
            selector.update(model, validator(model, done))
            self.validation_seconds_ += time.perf_counter() - started
        snapshots.save(
            done,
            epochs,
            losses=list(self.losses_),
            history=list(validator.history) if validator is not None else [],
            validation_seconds=self.validation_seconds_,
            selector=selector.state() if selector is not None else {},
        )

    def _epoch_bar(self, start: int, epochs: int) -> tqdm:
        """The progress bar of one training loop (from ``start``, a resumed run's epoch)."""
        return tqdm(
            initial=start,
            total=epochs,
            desc="MATCH-OPT training",
            unit="epoch",
            disable=not self.progress,
            leave=False,
        )

    def _validator(
        self,
        features: torch.Tensor,
        scores: torch.Tensor,
        y: np.ndarray,
        train_rows: np.ndarray,
        held_rows: np.ndarray,
    ) -> Validator:
        """Scores on the held-out rows, plus eq. 14's loss on trajectories through them."""
        config = self.config_
        rows = evaluation_rows(y, train_rows, held_rows, config.validation_split, self.seed)
        rule = quadrature_rule(config.quadrature, config.kappa)
        length = min(config.trajectory_length, len(rows))
        buckets = [rows[b] for b in rank_buckets(y[rows], length)]
        paths = sample_trajectories(buckets, np.random.default_rng([self.seed, 8]))
        paths = torch.from_numpy(paths[:VALIDATION_TRAJECTORIES]).to(features.device)

        def matching_loss(model: torch.nn.Module) -> float:
            with torch.enable_grad():
                losses = [
                    gradient_matching_loss(model, x, y_path, rule, config.alpha).item()
                    for x, y_path in zip(features[paths], scores[paths])
                ]
            return float(np.mean(losses))

        return Validator(
            features[rows],
            scores[rows].cpu().numpy(),
            extra_metrics={"matching-loss": matching_loss},
        )

    @classmethod
    def min_rows(cls, config: MatchOptConfig) -> tuple[int, str]:
        """One training row per rank bucket (``trajectory_length``), after the hold-out."""
        length, fraction = int(config.trajectory_length), float(config.validation_fraction)
        if fraction <= 0:
            return max(MIN_ROWS, length), (
                f"one row per rank bucket, trajectory_length={length}; "
                "a smaller trajectory_length lowers it"
            )
        need = max(MIN_ROWS, length)
        while need - round(fraction * need) < length or round(fraction * need) < 2:
            need += 1
        return need, (
            f"{length} training rows (trajectory_length) after holding out "
            f"validation_fraction={fraction:g}; a smaller trajectory_length lowers it"
        )

    def fit_report(self) -> dict:
        """Validation curves and the selected epoch (empty without validation)."""
        check_fitted(self)
        if self.validator_ is None:
            return {}
        return {
            "validation": self.validator_.curves(),
            "selected_epoch": self.selected_epoch_,
            # Validation's share of the cost, measured in the same run (same machine load).
            "validation_seconds": self.validation_seconds_,
            "train_seconds": self.train_seconds_,
        }

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` designs: gradient ascent on the surrogate from ``config.init`` starts."""
        check_fitted(self)
        config = self.config_
        starts = search_starts(self, n, config.init)
        final = gradient_ascent(
            self.model_,
            torch.from_numpy(starts).to(self._model_device()),
            config.search_steps,
            config.search_lr_scale
            * by_design_type(config.search_lr, self.data_.space.is_discrete, 0.01, 0.001),
        )
        return self.encoder_.decode_x(final.cpu().numpy())

    def _model_device(self) -> torch.device:
        return next(self.model_.parameters()).device

    def predict(self, designs: np.ndarray) -> np.ndarray:
        """Surrogate predictions (n,) of designs, in the units of the offline y."""
        check_fitted(self)
        designs = self.data_.space.validate(designs)
        with torch.no_grad():
            out = self.model_(
                torch.from_numpy(self.encoder_.encode_x(designs)).to(self._model_device())
            )
        return self.encoder_.decode_y(out.cpu().numpy())
