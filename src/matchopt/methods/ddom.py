"""DDOM: a score-conditioned diffusion model of designs, sampled at the best offline score.

Krishnamoorthy, Mashkaria & Grover, "Diffusion Models for Black-Box Optimization", ICML 2023;
details from the authors' code (github.com/siddarthk97/ddom, ``design_baselines/diff``:
``DiffusionTest`` / ``PluginReverseSDE`` and the ``simple_conditional_diffusion`` config).

Read top to bottom:

1. **Forward process**: the variance-preserving SDE ``dx = -beta(t)/2 x dt + sqrt(beta(t)) dW``,
   ``beta(t) = beta_min + (beta_max - beta_min) t`` on [0, T], T = 1, beta 0.01 -> 2.0, whose
   marginal is ``x_t = m(t) x_0 + s(t) eps`` (:func:`vp_marginal`).
2. **Network** ``a(x_t, t, y)``: an MLP on the concatenation [x_t, t, y], 3 hidden layers of
   1024 with Swish. It is trained so that ``a = g(t) * score``, ``g(t) = sqrt(beta(t))``, by the
   reweighted denoising loss ``mean_i w_i * sum_d (a * s(t) / g(t) + eps)^2 / 2`` with
   t ~ U(0, T) (:func:`denoising_loss`). The condition y (z-scored) is replaced by 0 with
   probability 0.15 (label dropout), which also trains the unconditional model used for
   classifier-free guidance. The weights w are :func:`matchopt.weighting.score_bin_weights`
   with the adaptive temperature ``|quantile_0.9(y - max y)|``. Adam 1e-3, batch 128.
3. **Sampling**: the reverse SDE from x ~ N(0, I) at diffusion time T down to 0, drift
   ``g^2 score + beta/2 x`` with the guided network output ``(1 + gamma) a(x, t, y) - gamma
   a(x, t, 0)``, gamma = 2, y = the best offline (z-scored) score, 1000 Heun steps
   (:func:`sample`). Exactly ``n`` designs are drawn and all are returned.

Designs: continuous designs are z-scored; discrete designs become design-bench logits, z-scored
(protocol.md), and are decoded by argmax.

Cost: the paper's 1000 epochs are kept as the default. On TF-Bind-8 (32,898 offline rows, 258
batches of 128 per epoch) that is 258,000 Adam steps of a 2.1M-parameter MLP: measured 36 ms of
CPU per step on one thread, i.e. about 2.6 CPU-hours per seed (extrapolated: roughly 1.5 h on an
idle 2-core machine), plus about 25 s for the 1000 Heun sampling steps. ``--set epochs=...``
lowers it.

Deviations from baselines.md / the public code:
* ``sampler="heun"`` (default) is the stochastic Heun method (drift averaged between the Euler
  predictor and the corrected point, diffusion averaged likewise, plain Euler on the last step).
  The public ``heun_sampler`` computes the corrected drift but never uses it: its step is
  Euler-Maruyama plus a small extra noise ``(g_next - g) / 2 * sqrt(dt) * z'``;
  ``sampler="ddom-script"`` reproduces that step.
* The public script draws 512 samples; we draw exactly ``n`` (128) and return all of them.
* Minibatches are reshuffled every epoch; the public script never shuffles (it indexes the data
  with the ``None`` that ``np.random.shuffle`` returns, and its DataLoader does not shuffle).
* We train on every row; the public script holds out 2% for validation (only logged; the last
  checkpoint is used).
* x is z-scored as baselines.md says; the public ``simple_conditional_diffusion`` config leaves
  x unnormalized (y is z-scored in both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from matchopt.config_fields import count, learning_rate, widths
from matchopt.data import OfflineData
from matchopt.encodings import DesignEncoder
from matchopt.errors import MatchoptError
from matchopt.methods.base import search_rng
from matchopt.methods.engine import TrainingRun
from matchopt.methods.seed_batch import end_seed_epoch, seed_loop
from matchopt.methods.training import Resumable, SeedBatchable
from matchopt.methods.wrappers import check_fitted, in_default_threads
from matchopt.models import LossTotal, adam, mlp_layers
from matchopt.models.stacked import SeedStack, per_seed
from matchopt.runtime import seeded_torch_rng
from matchopt.weighting import adaptive_temperature, score_bin_weights


@dataclass(frozen=True)
class DdomConfig:
    """DDOM hyperparameters; defaults are the paper's / public code's."""

    hidden: tuple[int, ...] = widths((1024, 1024, 1024))
    """Hidden layer widths (Swish) of the network."""
    beta_min: float = 0.01
    """beta(0) of the VP-SDE."""
    beta_max: float = 2.0
    """beta(T) of the VP-SDE."""
    horizon: float = 1.0
    """Diffusion time T."""
    label_dropout: float = 0.15
    """Probability of replacing the condition y by 0 during training."""
    guidance: float = 2.0
    """Classifier-free guidance weight gamma: (1 + gamma) a(y) - gamma a(0)."""
    epochs: int = count(1000)
    """Passes over the offline data (the paper's 1000; costly on CPU, see the docstring)."""
    batch_size: int = count(128)
    """Rows per Adam step."""
    lr: float = learning_rate(1e-3)
    """Adam learning rate."""
    n_bins: int = count(20)
    """Histogram bins of the sample reweighting."""
    weight_quantile: float = 0.9
    """Reweighting temperature = |this quantile of (y - max y)|."""
    weight_clip: float = 5.0
    """Upper bound of a sample weight."""
    sampling_steps: int = count(1000)
    """Steps of the reverse-SDE sampler."""
    sampler: str = field(default="heun", metadata={"choices": ("heun", "ddom-script")})
    """Reverse-SDE integrator: stochastic Heun, or the public script's step (see Deviations)."""


QUICK = {"hidden": (64, 64, 64), "epochs": 3, "sampling_steps": 50}


# --- 1. The variance-preserving SDE ------------------------------------------------------------


@dataclass(frozen=True)
class VPSDE:
    """``dx = -beta(t)/2 x dt + sqrt(beta(t)) dW`` with ``beta(t) = beta_min + (beta_max -
    beta_min) t`` on [0, horizon] (Song et al. 2021, eq. 32)."""

    beta_min: float
    beta_max: float
    horizon: float

    def beta(self, t: torch.Tensor) -> torch.Tensor:
        return self.beta_min + (self.beta_max - self.beta_min) * t

    def g(self, t: torch.Tensor) -> torch.Tensor:
        """Diffusion coefficient sqrt(beta(t))."""
        return self.beta(t).sqrt()

    def integral(self, t: torch.Tensor) -> torch.Tensor:
        """``int_0^t beta = beta_min t + (beta_max - beta_min) t^2 / 2``."""
        return self.beta_min * t + 0.5 * (self.beta_max - self.beta_min) * t**2


def vp_marginal(sde: VPSDE, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean factor m(t) and std s(t) of ``x_t | x_0 ~ N(m(t) x_0, s(t)^2 I)``.

    ``m = exp(-int_0^t beta / 2)``, ``s = sqrt(1 - exp(-int_0^t beta))``.
    """
    b = sde.integral(t)
    return torch.exp(-0.5 * b), (1.0 - torch.exp(-b)).sqrt()


# --- 2. Network and denoising loss -------------------------------------------------------------


class ScoreNet(nn.Module):
    """``a(x, t, y)`` = MLP([x, t, y]) with Swish, trained to equal g(t) * score.

    Args:
        dim: design feature dimension d.
        hidden: hidden layer widths.
    """

    def __init__(self, dim: int, hidden: tuple[int, ...] = (1024, 1024, 1024)):
        super().__init__()
        self.body = mlp_layers(dim + 2, hidden, dim, "swish")

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Output (n x d) for noisy designs ``x`` (n x d), times ``t`` (n,), scores ``y`` (n,)."""
        return self.body(torch.cat([x, t[:, None], y[:, None]], 1))


def denoising_loss(
    net: nn.Module,
    sde: VPSDE,
    x0: torch.Tensor,
    y: torch.Tensor,
    w: torch.Tensor,
    t: torch.Tensor,
    eps: torch.Tensor,
) -> torch.Tensor:
    """Reweighted denoising score matching loss of the public ``dsm_weighted``.

    ``mean_i w_i * sum_d (a(x_t, t, y)_i * s(t_i) / g(t_i) + eps_i)^2 / 2`` with
    ``x_t = m(t) x0 + s(t) eps``: its minimizer is ``a = -g eps / s = g * score``.

    Args:
        net: a(x, t, y).
        sde: the forward SDE.
        x0: clean designs (n x d).
        y: conditions (n,), some already dropped to 0.
        w: sample weights (n,).
        t: diffusion times (n,) in (0, T].
        eps: standard normal noise (n x d).
    """
    mean, std = vp_marginal(sde, t)
    x_t = mean[:, None] * x0 + std[:, None] * eps
    a = net(x_t, t, y)
    residual = a * (std / sde.g(t))[:, None] + eps
    return (w * 0.5 * residual.pow(2).sum(1)).mean()


# --- 3. Guided reverse-SDE sampling ------------------------------------------------------------


def reverse_drift(
    net: nn.Module, sde: VPSDE, x: torch.Tensor, t: float, y: torch.Tensor, guidance: float
) -> torch.Tensor:
    """Drift (n x d) of the reverse SDE at diffusion time ``t``, with classifier-free guidance.

    ``g(t) * [(1 + gamma) a(x, t, y) - gamma a(x, t, 0)] + beta(t)/2 x``
    (= g^2 score - f, the public ``PluginReverseSDE.mu``).
    """
    n = len(x)
    tt = torch.full((2 * n,), t, device=x.device)
    out = net(torch.cat([x, x]), tt, torch.cat([y, torch.zeros_like(y)]))
    a = (1.0 + guidance) * out[:n] - guidance * out[n:]
    return sde.g(tt[:n])[:, None] * a + 0.5 * sde.beta(tt[:n])[:, None] * x


@torch.no_grad()
def sample(
    net: nn.Module,
    sde: VPSDE,
    y: torch.Tensor,
    dim: int,
    steps: int,
    guidance: float,
    rng: np.random.Generator,
    method: str = "heun",
) -> torch.Tensor:
    """Integrate the reverse SDE from N(0, I) at t = T to t = 0 in ``steps`` equal steps.

    Reverse time r = T - t runs over 0, dt, ..., T - dt. Per step, with z ~ N(0, I):

    * ``heun``: predictor ``x' = x + dt mu(r, x) + sqrt(dt) g(r) z``; then (except on the last
      step) ``x <- x + dt (mu(r, x) + mu(r + dt, x')) / 2 + sqrt(dt) (g(r) + g(r + dt)) / 2 z``.
    * ``ddom-script``: ``x <- x' + (g(r + dt) - g(r)) / 2 sqrt(dt) z2`` (except on the last step),
      the public code's update.

    Args:
        net: a(x, t, y).
        sde: the forward SDE.
        y: conditions (n,).
        dim: feature dimension d.
        steps: number of steps.
        guidance: classifier-free guidance weight.
        rng: source of all noise.
        method: ``"heun"`` or ``"ddom-script"``.

    Returns:
        Samples (n x d).
    """
    n, dt = len(y), sde.horizon / steps

    def normal() -> torch.Tensor:  # drawn on the CPU: the same noise on every device
        return torch.from_numpy(rng.standard_normal((n, dim), dtype=np.float32)).to(y.device)

    def g(t: float) -> float:
        return float(sde.g(torch.tensor(t)))

    x = normal()
    for i in range(steps):
        t, t_next = sde.horizon - i * dt, sde.horizon - (i + 1) * dt  # diffusion times
        mu = reverse_drift(net, sde, x, t, y, guidance)
        z = normal()
        predicted = x + dt * mu + math.sqrt(dt) * g(t) * z
        if i == steps - 1:
            x = predicted
        elif method == "heun":
            mu_next = reverse_drift(net, sde, predicted, t_next, y, guidance)
            x = x + 0.5 * dt * (mu + mu_next) + math.sqrt(dt) * 0.5 * (g(t) + g(t_next)) * z
        else:
            x = predicted + 0.5 * (g(t_next) - g(t)) * math.sqrt(dt) * normal()
    return x


def epoch_draws(
    n_rows: int,
    dim: int,
    config: DdomConfig,
    noise: torch.Generator,
    device: torch.device,
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """One epoch's draws from ``noise`` (on the CPU), in the order the steps use them: per
    minibatch its rows, label-dropout mask, times and eps; moved to ``device`` in one copy
    (not four per step)."""
    draws = []
    for batch in torch.randperm(n_rows, generator=noise).split(config.batch_size):
        keep = torch.rand(len(batch), generator=noise) > config.label_dropout
        t = torch.rand(len(batch), generator=noise) * config.horizon
        eps = torch.randn((len(batch), dim), generator=noise)
        draws.append((batch, keep, t, eps))
    moved = [torch.cat(parts).to(device) for parts in zip(*draws)]
    sizes = [len(batch) for batch, *_ in draws]
    return list(zip(*(part.split(sizes) for part in moved)))


# --- 4. The method -----------------------------------------------------------------------------


class Ddom(Resumable, SeedBatchable):
    """DDOM (Krishnamoorthy et al., ICML 2023): conditional diffusion sampled at max offline y.

    Args:
        config: :class:`DdomConfig` (paper defaults when ``None``).
        seed: seeds the network's initialization, batches, label dropout and all noise.
        progress: show a training progress bar on stderr.

    Attributes:
        net_: the trained network a(x, t, y).
        encoder_: maps designs and y to the normalized space and back.
        weights_: the sample weights (N,).
        temperature_: the adaptive reweighting temperature.
        losses_: mean training loss of every epoch.
    """

    config_class = DdomConfig
    presets = {"paper": {}, "quick": QUICK}

    def _sde(self) -> VPSDE:
        config = self.config_
        return VPSDE(config.beta_min, config.beta_max, config.horizon)

    def _prepare(self, data: OfflineData) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Encoder, reweighting and the training tensors on the device: normalized features
        (N x d), z-scored scores (N,) and sample weights (N,)."""
        config = self.config_
        self.encoder_ = DesignEncoder(data.space).fit(data.x, data.y)
        features = torch.from_numpy(self.encoder_.encode_x(data.x))
        scores = torch.from_numpy(self.encoder_.encode_y(data.y))
        self.temperature_ = adaptive_temperature(scores.numpy(), config.weight_quantile)
        self.weights_ = score_bin_weights(
            scores.numpy(), self.temperature_, config.n_bins, clip=config.weight_clip
        )
        device = self.device_
        return features.to(device), scores.to(device), torch.from_numpy(self.weights_).to(device)

    def _new_net(self, dim: int) -> ScoreNet:
        """The seed's untrained network (initialized on the CPU: the same on every device)."""
        with seeded_torch_rng(self.seed):
            return ScoreNet(dim, self.config_.hidden).to(self.device_)

    @classmethod
    def _train(cls, methods: Sequence[Ddom], data: OfflineData, run: TrainingRun) -> None:
        """The training loop of ``methods`` (one seed each): the seeds' networks as one
        :class:`SeedStack`, one Adam step for all, each seed's draws from its own generator in
        its own order."""
        first = methods[0]
        config = first.config_
        sde = first._sde()
        features, scores, weights = first._prepare(data)
        for method in methods[1:]:  # the same data: the same encoder and weights
            method.encoder_, method.temperature_ = first.encoder_, first.temperature_
            method.weights_ = first.weights_
        dim = features.shape[1]
        noises = [torch.Generator().manual_seed(m.seed) for m in methods]
        nets = [m._new_net(dim) for m in methods]
        stack = SeedStack(nets)
        optimizer = adam(stack.parameters(), lr=config.lr)

        def loss_of_one(net, x0, y, w, t, eps):  # noqa: ANN001, ANN202 (one seed's slice)
            return denoising_loss(net, sde, x0, y, w, t, eps)

        losses_of_all = per_seed(loss_of_one, stack)
        snapshots, losses, bar = seed_loop(
            run, data, "DDOM", len(methods), config.epochs, first.progress,
            model=stack, optimizer=optimizer, **{f"noise{k}": g for k, g in enumerate(noises)},
        )  # fmt: skip
        for epoch in bar:
            totals = [LossTotal() for _ in methods]
            draws = [epoch_draws(len(features), dim, config, g, features.device) for g in noises]
            for steps in zip(*draws):
                batch, keep, t, eps = (torch.stack(part) for part in zip(*steps))
                x0, y, w = features[batch], scores[batch], weights[batch]
                optimizer.zero_grad()
                seed_losses = losses_of_all(x0, y * keep, w, t, eps)
                seed_losses.sum().backward()
                optimizer.step()
                for total, loss in zip(totals, seed_losses):
                    total.add(loss, batch.shape[1])
            end_seed_epoch(snapshots, losses, totals, len(features), bar, epoch + 1, config.epochs)
        bar.close()
        stack.unstack_into(nets)
        for method, net, own in zip(methods, nets, losses):
            net.eval()
            method.net_, method.losses_, method.data_ = net, own, data

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` reverse-SDE samples conditioned on the best offline score, in the data's format."""
        check_fitted(self)
        config = self.config_
        y_max = float(self.encoder_.encode_y(self.data_.y).max())
        rng = search_rng(self)
        features = (
            sample(
                self.net_,
                self._sde(),
                torch.full((n,), y_max, device=next(self.net_.parameters()).device),
                self.encoder_.n_features,
                config.sampling_steps,
                config.guidance,
                rng,
                config.sampler,
            )
            .cpu()
            .numpy()
        )
        if not np.isfinite(features).all():
            raise MatchoptError("DDOM sampling diverged (NaN or inf); try more sampling_steps")
        return self.encoder_.decode_x(features)
