"""Probabilistic forward models: MLPs with a Gaussian head, and bootstrapped ensembles of them.

This is design-baselines' "ForwardModel", shared by GA, Ens-Mean/Min, CMA-ES, BO-qEI and CbAS
(baselines.md): the head outputs a mean and a log-std; the log-std is soft-clamped between two
trainable bounds (initialized to log 0.2 above and log 0.1 below) with softplus; the loss is the
negative log likelihood; each ensemble member trains on its own bootstrap, expressed as
per-sample weights = how often each row is drawn among N draws with replacement.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from matchopt.errors import MatchoptError
from matchopt.models.ensemble_cache import EnsembleCache, ensemble_key
from matchopt.models.mlp import ACTIVATIONS, mlp_layers
from matchopt.models.optim import adam
from matchopt.runtime import seeded_torch_rng
from matchopt.state_checks import describe


@dataclass(frozen=True)
class EnsembleConfig:
    """Config fields of a Gaussian-ensemble surrogate, the same names in every method that fits
    one (GA, Ens-Mean/Min, CMA-ES, BO-qEI); defaults are design-baselines' CMA-ES / BO-qEI
    ensemble. A method's config subclasses it and may give other defaults."""

    n_models: int = 5
    """Ensemble size of the surrogate."""
    hidden: tuple[int, ...] = (256,)
    """Hidden layer widths of every ensemble member."""
    activation: str = field(default="leaky_relu", metadata={"choices": tuple(ACTIVATIONS)})
    """Hidden activation of the ensemble members."""
    epochs: int = 100
    """Training epochs of every member."""
    batch_size: int = 100
    """Mini-batch size of surrogate training."""
    lr: float = 1e-3
    """Adam learning rate of surrogate training."""


def soft_clamp(log_std: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """design-baselines' smooth clamp of a log-std between (trainable) bounds, softplus on both."""
    log_std = high - nn.functional.softplus(high - log_std)
    return low + nn.functional.softplus(log_std - low)


class GaussianMLP(nn.Module):
    """MLP ``d -> hidden... -> (mean, log_std)`` with a soft-clamped log-std.

    Args:
        in_features: input dimension d.
        hidden: hidden layer widths.
        activation: ``"leaky_relu"``, ``"relu"``, ``"softplus"``, ``"swish"`` or ``"tanh"``.
        max_std, min_std: initial values of the trainable std bounds.
    """

    def __init__(
        self,
        in_features: int,
        hidden: Sequence[int] = (2048, 2048),
        activation: str = "leaky_relu",
        max_std: float = 0.2,
        min_std: float = 0.1,
    ):
        super().__init__()
        self.body = mlp_layers(in_features, hidden, 2, activation)
        self.max_log_std = nn.Parameter(torch.tensor(math.log(max_std)))
        self.min_log_std = nn.Parameter(torch.tensor(math.log(min_std)))

    def __matchopt_check__(self) -> None:
        """Checks of a member read from a model file (:mod:`matchopt.state`; its layers are
        checked there): a body of linear layers ending in 2 outputs, and scalar std bounds."""
        body = self._modules.get("body")
        if not isinstance(body, nn.Sequential) or not len(body):
            raise MatchoptError(f"body is {describe(body)}, expected a Sequential of layers")
        for index in (0, -1):
            if not isinstance(body[index], nn.Linear):
                raise MatchoptError(f"body[{index}] is {describe(body[index])}, expected a Linear")
        if body[-1].out_features != 2:
            raise MatchoptError(
                f"body[-1] gives {body[-1].out_features} outputs, expected 2 (mean, log-std)"
            )
        for name in ("max_log_std", "min_log_std"):
            value = self._parameters.get(name)
            if value is None or value.shape != () or value.dtype != body[0].weight.dtype:
                raise MatchoptError(
                    f"{name} is {describe(value)}, expected a scalar of {body[0].weight.dtype}"
                )

    @property
    def in_features(self) -> int:
        """Input dimension d."""
        return self.body[0].in_features

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean (n,) and soft-clamped log-std (n,) of the prediction for ``x`` (n x d)."""
        mean, log_std = self.body(x).unbind(-1)
        return mean, soft_clamp(log_std, self.min_log_std, self.max_log_std)

    def nll(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Negative log likelihood of each row (n,)."""
        mean, log_std = self(x)
        return -torch.distributions.Normal(mean, log_std.exp()).log_prob(y)


def bootstrap_weights(n: int, n_models: int, rng: np.random.Generator) -> np.ndarray:
    """(n_models x n) counts: how often each row appears among n draws with replacement."""
    return np.stack([np.bincount(rng.integers(0, n, size=n), minlength=n) for _ in range(n_models)])


def fit_gaussian(
    model: GaussianMLP,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    sample_weights: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    progress: bool = False,
    desc: str = "training",
    skip_zero_weights: bool = True,
) -> list[float]:
    """Train by weighted NLL with Adam over shuffled mini-batches; returns the epoch losses.

    The loss of a batch is ``sum(w_i * nll_i) / sum(w_i)`` with ``w`` the sample weights
    (1 if None), as design-baselines' bootstrapped training. Rows of weight 0 (about 37% of a
    bootstrap) add nothing to that sum, so they are left out of the forward pass: the same loss
    and gradients up to summation order, for 1.15-1.44x less work
    (``benchmarks/speedups.py``). Batches are drawn over all rows as before, so the batch order
    and the number of optimizer steps are unchanged.
    """
    optimizer = adam(model.parameters(), lr=lr)
    weights = torch.ones(len(x)) if sample_weights is None else sample_weights.float()
    weights = weights.to(x.device)
    skip_zero_rows = skip_zero_weights and bool((weights == 0).any())
    losses = []
    for _ in tqdm(range(epochs), desc=desc, unit="epoch", disable=not progress, leave=False):
        order = torch.randperm(len(x), generator=generator).to(x.device)  # drawn on the CPU
        total = 0.0
        for start in range(0, len(x), batch_size):
            batch = order[start : start + batch_size]
            w = weights[batch]
            n_rows = len(batch)
            if skip_zero_rows:
                # An all-zero batch leaves an empty forward pass: zero gradients and an Adam step
                # on them, exactly as the weighted loss of the full batch gives.
                kept = w > 0
                batch, w = batch[kept], w[kept]
            loss = (w * model.nll(x[batch], y[batch])).sum() / w.sum().clamp_min(1e-12)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * n_rows
        losses.append(total / len(x))
    return losses


#: Members no wider than this train in lockstep as one batched network (:func:`fit_grouped`):
#: small matrix products leave most of a core idle, batched ones fill it (3-4x per step on the
#: 256-wide members of CMA-ES, BO-qEI and CbAS); wide members (GA's 2048) gain nothing from it
#: and keep the sequential path, which can skip zero-weight rows.
GROUPED_MAX_WIDTH = 512


def trains_grouped(hidden: Sequence[int]) -> bool:
    """Whether members of these hidden widths train in lockstep (:func:`fit_grouped`)."""
    return max(hidden, default=0) <= GROUPED_MAX_WIDTH


def fit_grouped(
    members: Sequence[GaussianMLP],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    sample_weights: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    progress: bool = False,
) -> list[float]:
    """Train ``members`` (same architecture) together: the training :func:`fit_gaussian` gives
    each of them in turn, as one batched network.

    Every member sees the batches it would see when trained alone after the members before it
    (its batch orders come from ``generator`` in the same sequence), its own sample weights
    (``sample_weights``: members x rows) and its own Adam state; the loss summed over members has
    each member's loss gradient in that member's parameters. Only the summation order of the
    batched products differs, so the result equals sequential training up to float rounding.
    Returns the epoch losses summed over members.
    """
    generator = torch.Generator() if generator is None else generator
    # The generator's state where each member would start drawing its batch orders.
    orders = []
    for _ in members:
        own = torch.Generator()
        own.set_state(generator.get_state())
        orders.append(own)
        for _ in range(epochs):
            torch.randperm(len(x), generator=generator)

    layers = [[m for m in member.body if isinstance(m, nn.Linear)] for member in members]
    activations = [m for m in members[0].body if not isinstance(m, nn.Linear)]
    weight = [
        nn.Parameter(torch.stack([ls[k].weight.detach().T for ls in layers]))
        for k in range(len(layers[0]))
    ]  # members x in x out
    bias = [
        nn.Parameter(torch.stack([ls[k].bias.detach()[None] for ls in layers]))
        for k in range(len(layers[0]))
    ]  # members x 1 x out
    max_log_std = nn.Parameter(torch.stack([m.max_log_std.detach() for m in members])[:, None])
    min_log_std = nn.Parameter(torch.stack([m.min_log_std.detach() for m in members])[:, None])
    parameters = [p for pair in zip(weight, bias) for p in pair] + [max_log_std, min_log_std]
    optimizer = adam(parameters, lr=lr)
    n_members = len(members)
    weights = torch.ones(n_members, len(x)) if sample_weights is None else sample_weights.float()
    weights = weights.to(x.device)
    losses = []
    for _ in tqdm(range(epochs), desc="ensemble", unit="epoch", disable=not progress, leave=False):
        order = torch.stack([torch.randperm(len(x), generator=g) for g in orders]).to(x.device)
        total = 0.0
        for start in range(0, len(x), batch_size):
            batch = order[:, start : start + batch_size]  # members x B
            h = x[batch]  # members x B x d
            for k in range(len(weight)):
                h = torch.baddbmm(bias[k], h, weight[k])
                if k < len(activations):
                    h = activations[k](h)
            mean, log_std = h.unbind(-1)
            log_std = soft_clamp(log_std, min_log_std, max_log_std)
            nll = -torch.distributions.Normal(mean, log_std.exp()).log_prob(y[batch])
            w = weights.gather(1, batch)
            member_losses = (w * nll).sum(1) / w.sum(1).clamp_min(1e-12)
            loss = member_losses.sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * batch.shape[1]
        losses.append(total / len(x))
    with torch.no_grad():
        for i, member in enumerate(members):
            for k, linear in enumerate(layers[i]):
                linear.weight.copy_(weight[k][i].T)
                linear.bias.copy_(bias[k][i, 0])
            member.max_log_std.copy_(max_log_std[i, 0])
            member.min_log_std.copy_(min_log_std[i, 0])
    return losses


class GaussianEnsemble(nn.Module):
    """Bootstrapped ensemble of :class:`GaussianMLP` members.

    Args:
        in_features: input dimension d.
        n_models: number of members.
        hidden, activation: architecture of every member.
    """

    def __init__(
        self,
        in_features: int,
        n_models: int = 5,
        hidden: Sequence[int] = (2048, 2048),
        activation: str = "leaky_relu",
    ):
        super().__init__()
        self.members = nn.ModuleList(
            GaussianMLP(in_features, hidden, activation) for _ in range(n_models)
        )

    def __matchopt_check__(self) -> None:
        """Checks of an ensemble read from a model file (:mod:`matchopt.state`; each member is
        checked there): one or more members, all taking the same inputs."""
        members = self._modules.get("members")
        if not isinstance(members, nn.ModuleList) or not len(members):
            raise MatchoptError(f"members is {describe(members)}, expected a list of members")
        for index, member in enumerate(members):
            if not isinstance(member, GaussianMLP):
                raise MatchoptError(
                    f"members[{index}] is {describe(member)}, expected a GaussianMLP"
                )
            if member.in_features != members[0].in_features:
                raise MatchoptError(
                    f"members[{index}] takes {member.in_features} features, members[0] "
                    f"{members[0].in_features}"
                )

    @property
    def in_features(self) -> int:
        """Input dimension d."""
        return self.members[0].in_features

    def fit(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        epochs: int,
        batch_size: int,
        lr: float,
        seed: int,
        bootstrap: bool = True,
        progress: bool = False,
        grouped: bool | None = None,
        first_member: int = 0,
        member_done: Callable[[int], None] | None = None,
    ) -> GaussianEnsemble:
        """Train each member (on its own bootstrap when ``bootstrap``).

        ``grouped``: train the members in lockstep as one batched network (:func:`fit_grouped`,
        the same training up to float rounding); None = when the members are no wider than
        :data:`GROUPED_MAX_WIDTH`. Members trained one after another can start at
        ``first_member`` (the ones before it already trained, e.g. read back after a kill:
        their generator draws are replayed, so the rest train as in an uninterrupted run), and
        ``member_done(k)`` is called after the first ``k`` members are trained.
        """
        rng = np.random.default_rng(seed)
        weights = bootstrap_weights(len(x), len(self.members), rng) if bootstrap else None
        generator = torch.Generator().manual_seed(seed)
        if grouped is None:
            widths = [m.out_features for m in self.members[0].body if isinstance(m, nn.Linear)]
            grouped = trains_grouped(widths[:-1])
        if grouped:
            fit_grouped(
                list(self.members),
                x,
                y,
                epochs=epochs,
                batch_size=batch_size,
                lr=lr,
                sample_weights=None if weights is None else torch.from_numpy(weights),
                generator=generator,
                progress=progress,
            )
            return self
        for index, member in enumerate(self.members):
            if index < first_member:
                for _ in range(epochs):  # the batch orders this member drew
                    torch.randperm(len(x), generator=generator)
                continue
            fit_gaussian(
                member,
                x,
                y,
                epochs=epochs,
                batch_size=batch_size,
                lr=lr,
                sample_weights=None if weights is None else torch.from_numpy(weights[index]),
                generator=generator,
                progress=progress,
                desc=f"member {index + 1}/{len(self.members)}",
            )
            if member_done is not None:
                member_done(index + 1)
        return self

    @classmethod
    def initialized(
        cls,
        in_features: int,
        *,
        n_models: int,
        hidden: Sequence[int],
        activation: str,
        seed: int,
        device: torch.device | str = "cpu",
    ) -> GaussianEnsemble:
        """An untrained ensemble initialized from ``seed`` on the CPU (the same start on every
        device, and the global RNG left as it was), then moved to ``device``."""
        with seeded_torch_rng(seed):
            ensemble = cls(in_features, n_models, hidden, activation)
        return ensemble.to(device)

    @classmethod
    def trained(
        cls,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        n_models: int,
        hidden: Sequence[int],
        activation: str,
        epochs: int,
        batch_size: int,
        lr: float,
        seed: int,
        bootstrap: bool = True,
        progress: bool = False,
    ) -> GaussianEnsemble:
        """An ensemble initialized from ``seed``, fitted on (x, y) and frozen (eval mode, no
        parameter gradients) - the surrogate of GA, the ensembles, CMA-ES, BO-qEI and CbAS."""
        ensemble = cls.initialized(
            x.shape[1],
            n_models=n_models,
            hidden=hidden,
            activation=activation,
            seed=seed,
            device=x.device,
        )
        ensemble.fit(
            x,
            y,
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            seed=seed,
            bootstrap=bootstrap,
            progress=progress,
        )
        return ensemble.eval().requires_grad_(False)

    @classmethod
    def from_config(
        cls,
        x: torch.Tensor,
        y: torch.Tensor,
        config: Any,
        seed: int,
        progress: bool = False,
        cache: EnsembleCache | None = None,
    ) -> GaussianEnsemble:
        """:meth:`trained` with the fields of an :class:`EnsembleConfig` (and its ``bootstrap``
        field where the config has one; True otherwise).

        With ``cache``, the first ``n_models`` members of an ensemble trained on the same data
        with the same fields and seed are taken from it (the same members, bit for bit, see
        :mod:`matchopt.models.ensemble_cache`); otherwise the trained ensemble is stored there,
        member after member. ``shared_`` of the result says which happened.
        """
        fields = {
            "epochs": config.epochs,
            "batch_size": config.batch_size,
            "lr": config.lr,
            "seed": seed,
            "bootstrap": getattr(config, "bootstrap", True),
            "progress": progress,
        }
        architecture = {
            "n_models": config.n_models,
            "hidden": config.hidden,
            "activation": config.activation,
        }
        if cache is None:
            return cls.trained(x, y, **architecture, **fields)
        grouped = trains_grouped(config.hidden)
        key = ensemble_key(x, y, config, seed, grouped)
        ensemble = cls.initialized(x.shape[1], **architecture, seed=seed, device=x.device)
        n = len(ensemble.members)
        done, earlier = cache.load(key, ensemble)
        if done >= n:
            ensemble.shared_ = {"from_cache": True, "train_seconds": earlier}
            return ensemble.eval().requires_grad_(False)
        if grouped:
            done = 0  # members trained in lockstep are not a prefix of a larger ensemble
        start = time.perf_counter()

        def member_done(k: int) -> None:  # each finished member survives a kill
            cache.store(key, ensemble, k, earlier + time.perf_counter() - start)

        ensemble.fit(x, y, **fields, first_member=done, member_done=member_done)
        seconds = earlier + time.perf_counter() - start
        if grouped:  # fit() reports members trained one after another only
            cache.store(key, ensemble, n, seconds)
        ensemble.shared_ = {
            "from_cache": False,
            "train_seconds": seconds,
            "resumed_members": done,
            "earlier_seconds": earlier if done else 0.0,  # training of the resumed members
        }
        return ensemble.eval().requires_grad_(False)

    def member_means(self, x: torch.Tensor) -> torch.Tensor:
        """Predicted means of every member (n_models x n)."""
        return torch.stack([member(x)[0] for member in self.members])

    def predict_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Mean over members of the predicted means (n,)."""
        return self.member_means(x).mean(0)
