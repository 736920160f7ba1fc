"""COMs: conservative objective models.

Trabucco, Kumar, Geng, Levine. "Conservative Objective Models for Effective Offline Model-Based
Optimization", ICML 2021. Reference code: design-baselines ``coms_cleaned`` and the launch
scripts ``scripts/coms-*.sh`` (the configuration baselines.md records).

Read top to bottom:

1. **Negatives**: for every training batch, ``x-`` = 50 plain gradient-ascent steps
   ``x += eta * grad_x f(x)`` on the current model from the batch itself, with
   ``eta = particle_lr * sqrt(dim x)``; no gradient flows through them.
2. **Conservative loss**: ``mean((f(x) - y)^2 + alpha * (f(x-) - f(x)))`` for the model, and
   ``mean(alpha * tau - alpha * (f(x-) - f(x)))`` for ``log alpha`` (dual descent: alpha grows
   while the model overestimates its own ascent points by more than ``tau``). Both take one Adam
   step per batch from the same forward pass.
3. **Search**: from the 128 best offline designs, 50 steps of the same ascent; the end points are
   the designs.

Design types. Discrete designs are design-bench logits, not z-scored, with ``tau = 2`` and
``particle_lr = 2`` (the TF-Bind scripts); continuous designs are z-scored, with ``tau = 0.5``
and ``particle_lr = 0.05``. Scores are z-scored in both cases. The config fields default to
``None`` = that choice by design type.

Deviations from the reference code (listed in docs/baselines.md):
* the model trains on every offline row; the reference holds out 500 random rows that only feed
  its validation logs.
* PyTorch defaults (Kaiming-uniform initialization, Adam eps 1e-8) instead of Keras'
  (Glorot-uniform, eps 1e-7).
* the reference logs scores at every search step; we return the end points of the 50 steps
  (the reference's final step), chosen without the oracle.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from matchopt.checkpoints import state_problem
from matchopt.config_fields import by_design_type, count, learning_rate, widths
from matchopt.data import OfflineData
from matchopt.encodings import DesignEncoder
from matchopt.methods.base import search_starts
from matchopt.methods.engine import TrainingRun
from matchopt.methods.seed_batch import end_seed_epoch, seed_loop
from matchopt.methods.training import Resumable, SeedBatchable
from matchopt.methods.wrappers import check_fitted, in_default_threads
from matchopt.models import LossTotal, adam, mlp_layers
from matchopt.models.stacked import SeedStack, per_seed
from matchopt.runtime import seeded_torch_rng
from matchopt.search import gradient_ascent


@dataclass(frozen=True)
class ComsConfig:
    """COMs hyperparameters; defaults are the design-baselines launch scripts' (baselines.md)."""

    hidden: tuple[int, ...] = widths((2048, 2048))
    """Hidden layer widths of the ReLU model."""
    epochs: int = count(50)
    """Training epochs over the offline data."""
    batch_size: int = count(128)
    """Rows per training batch."""
    lr: float = learning_rate(3e-4)
    """Adam learning rate of the model."""
    initial_alpha: float = 0.1
    """Initial value of the Lagrange multiplier alpha (log alpha is trained)."""
    alpha_lr: float = learning_rate(0.01)
    """Adam learning rate of log alpha."""
    tau: float | None = None
    """Overestimation limit; None = 2.0 for discrete designs, 0.5 for continuous ones."""
    particle_lr: float | None = learning_rate(None)
    """Ascent step before the sqrt(dim) scaling; None = 2.0 discrete, 0.05 continuous."""
    train_steps: int = count(50)
    """Gradient-ascent steps that make the negatives of each batch."""
    search_steps: int = count(50, minimum=0)
    """Gradient-ascent steps of the final search."""
    normalize_x: bool | None = None
    """z-score the features; None = no for discrete designs (logits), yes for continuous ones."""


QUICK = {"hidden": (64, 64), "epochs": 2, "train_steps": 5, "search_steps": 10}


# --- 1. Negatives: gradient ascent on the model itself -----------------------------------------


@contextlib.contextmanager
def frozen(model: nn.Module) -> Iterator[nn.Module]:
    """Stop gradients into the parameters while ascending on the inputs, then restore."""
    flags = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        yield model
    finally:
        for p, flag in zip(model.parameters(), flags):
            p.requires_grad_(flag)


def ascend(model: nn.Module, x: torch.Tensor, steps: int, step_size: float) -> torch.Tensor:
    """``steps`` plain ascent steps ``x += step_size * grad_x f(x)`` (n x d), detached."""
    with frozen(model):
        return gradient_ascent(lambda z: model(z).squeeze(-1), x, steps, step_size, optimizer="sgd")


# --- 2. Conservative loss ----------------------------------------------------------------------


def conservative_losses(
    model: nn.Module,
    log_alpha: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    x_neg: torch.Tensor,
    tau: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The model loss, the multiplier loss and the mean overestimation of one batch.

    Args:
        model: the surrogate f (n x d -> n x 1).
        log_alpha: scalar log of the Lagrange multiplier.
        x: batch of designs (n x d); y: their normalized scores (n,).
        x_neg: the batch's ascent points (n x d), constant.
        tau: overestimation limit.

    Returns:
        ``mean((f(x)-y)^2 + alpha*(f(x-)-f(x)))`` (gradient to the model only),
        ``mean(alpha*tau - alpha*(f(x-)-f(x)))`` (gradient to log alpha only), and the mean
        overestimation ``f(x-) - f(x)`` (for logs).
    """
    prediction = model(x).squeeze(-1)
    overestimation = model(x_neg).squeeze(-1) - prediction
    alpha = log_alpha.exp()
    model_loss = ((prediction - y).pow(2) + alpha.detach() * overestimation).mean()
    alpha_loss = (alpha * tau - alpha * overestimation.detach()).mean()
    return model_loss, alpha_loss, overestimation.detach().mean()


# --- 3. The method -----------------------------------------------------------------------------


def _conservative_step(
    losses_of_all: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    optimizers: tuple[torch.optim.Optimizer, torch.optim.Optimizer],
    log_alpha: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    x_neg: torch.Tensor,
) -> torch.Tensor:
    """One step of the models and of log alpha on one batch per seed; each seed's model loss."""
    model_loss, alpha_loss, _ = losses_of_all(log_alpha, x, y, x_neg)
    for optimizer in optimizers:
        optimizer.zero_grad()
    (model_loss + alpha_loss).sum().backward()
    for optimizer in optimizers:
        optimizer.step()
    return model_loss


def _conservative_epoch(
    losses_of_all: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    optimizers: tuple[torch.optim.Optimizer, torch.optim.Optimizer],
    log_alpha: torch.Tensor,
    rows: tuple[torch.Tensor, torch.Tensor],
    generators: list[torch.Generator],
    ascent: tuple[nn.Module, int, float, int],
) -> list[LossTotal]:
    """One epoch of every seed over the offline ``rows`` (features, scores) in its own batch
    order (from its ``generators`` entry): for each batch, the negatives by ``ascent`` (the
    stacked model, its steps and step size, and the batch size), then :func:`_conservative_step`.
    Each seed's total model loss."""
    features, scores = rows
    stack, train_steps, step_size, batch_size = ascent
    n_rows = len(features)
    orders = torch.stack([torch.randperm(n_rows, generator=g) for g in generators])
    orders = orders.to(features.device)
    totals = [LossTotal() for _ in generators]
    for begin in range(0, n_rows, batch_size):
        batch = orders[:, begin : begin + batch_size]  # seeds x B
        x, y = features[batch], scores[batch]
        x_neg = ascend(stack, x, train_steps, step_size)
        model_loss = _conservative_step(losses_of_all, optimizers, log_alpha, x, y, x_neg)
        for total, loss in zip(totals, model_loss):
            total.add(loss, batch.shape[1])
    return totals


class Coms(Resumable, SeedBatchable):
    """COMs (Trabucco et al., ICML 2021): conservative model + gradient ascent.

    Args:
        config: :class:`ComsConfig` (paper defaults when ``None``).
        seed: seeds the model's initialization and the batch order.
        progress: show a training progress bar on stderr.

    Attributes:
        model_: the trained model (normalized features -> normalized score, n x 1).
        encoder_: maps designs to features and back.
        alpha_: final value of the Lagrange multiplier.
        step_size_: the ascent step ``particle_lr * sqrt(dim)``.
        losses_: mean model loss of every epoch.
    """

    config_class = ComsConfig
    presets = {"paper": {}, "quick": QUICK}

    def _prepare(self, data: OfflineData) -> tuple[torch.Tensor, torch.Tensor, float, float]:
        """Encoder, then the training tensors on the device (features N x d, normalized scores
        N), the overestimation limit tau and the ascent step ``particle_lr * sqrt(d)``."""
        config = self.config_
        discrete = data.space.is_discrete
        normalize_x = by_design_type(config.normalize_x, discrete, False, True)
        tau = by_design_type(config.tau, discrete, 2.0, 0.5)
        particle_lr = by_design_type(config.particle_lr, discrete, 2.0, 0.05)
        self.encoder_ = DesignEncoder(data.space, normalize_x=normalize_x).fit(data.x, data.y)
        device = self.device_
        features = torch.from_numpy(self.encoder_.encode_x(data.x)).to(device)
        scores = torch.from_numpy(self.encoder_.encode_y(data.y)).to(device)
        return features, scores, tau, particle_lr * math.sqrt(features.shape[1])

    def _new_model(self, dim: int) -> nn.Module:
        """The seed's untrained model (initialized on the CPU: the same on every device)."""
        with seeded_torch_rng(self.seed):
            return mlp_layers(dim, self.config_.hidden, 1, "relu").to(self.device_)

    @classmethod
    def _train(cls, methods: Sequence[Coms], data: OfflineData, run: TrainingRun) -> None:
        """The conservative training (module notes, 2) of ``methods`` (one seed each) as one
        seed stack: the seeds' models are one :class:`SeedStack` (the negatives of all seeds in
        one ascent: a seed's output depends on its own inputs only), one log alpha per seed,
        each seed's batch order from its own generator."""
        first = methods[0]
        config = first.config_
        features, scores, tau, step_size = first._prepare(data)
        for method in methods[1:]:
            method.encoder_ = first.encoder_
        generators = [torch.Generator().manual_seed(m.seed) for m in methods]
        models = [m._new_model(features.shape[1]) for m in methods]
        stack = SeedStack(models)
        start_alpha = torch.full(
            (len(methods),), math.log(config.initial_alpha), device=features.device
        )
        log_alpha = nn.Parameter(start_alpha)
        optimizer = adam(stack.parameters(), lr=config.lr)
        alpha_optimizer = adam([log_alpha], lr=config.alpha_lr)

        def losses_of_one(net, log_alpha, x, y, x_neg):  # noqa: ANN001, ANN202 (one seed's slice)
            return conservative_losses(net, log_alpha, x, y, x_neg, tau)

        def alpha_check(values: dict, epoch: int) -> str | None:
            return state_problem(values.get("log_alpha"), log_alpha.detach(), "snapshot log_alpha")

        snapshots, losses, bar = seed_loop(
            run, data, "COMs", len(methods), config.epochs, first.progress, alpha_check,
            model=stack, optimizer=optimizer, alpha_optimizer=alpha_optimizer,
            **{f"noise{k}": g for k, g in enumerate(generators)},
        )  # fmt: skip
        if snapshots.saved:
            with torch.no_grad():
                log_alpha.copy_(snapshots.saved["log_alpha"])
        epoch_of_all = functools.partial(
            _conservative_epoch,
            per_seed(losses_of_one, stack),
            (optimizer, alpha_optimizer),
            log_alpha,
            (features, scores),
            generators,
            (stack, config.train_steps, step_size, config.batch_size),
        )
        for epoch in bar:
            totals = epoch_of_all()
            values = {"log_alpha": log_alpha.detach().clone()}
            end_seed_epoch(
                snapshots, losses, totals, len(features), bar, epoch + 1, config.epochs, **values
            )
        bar.close()
        stack.unstack_into(models)
        for k, (method, model) in enumerate(zip(methods, models)):
            method.model_, method.losses_ = model, losses[k]
            method.alpha_ = float(log_alpha.detach()[k].exp())
            method.step_size_, method.data_ = step_size, data

    def proposal_cap(self, n_rows: int) -> int | None:
        """The search starts from the top offline rows: at most one design per row."""
        return n_rows

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` designs: ``search_steps`` ascent steps from the ``n`` best offline designs."""
        check_fitted(self)
        starts = search_starts(self, n, "topk")
        device = next(self.model_.parameters()).device
        final = ascend(
            self.model_,
            torch.from_numpy(starts).to(device),
            self.config_.search_steps,
            self.step_size_,
        )
        return self.encoder_.decode_x(final.cpu().numpy())
