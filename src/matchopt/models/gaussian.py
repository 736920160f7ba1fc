"""Probabilistic forward models: MLPs with a Gaussian head, and bootstrapped ensembles of them.

This is design-baselines' "ForwardModel", shared by GA, Ens-Mean/Min, CMA-ES, BO-qEI and CbAS
(baselines.md): the head outputs a mean and a log-std; the log-std is soft-clamped between two
trainable bounds (initialized to log 0.2 above and log 0.1 below) with softplus; the loss is the
negative log likelihood; each ensemble member trains on its own bootstrap, expressed as
per-sample weights = how often each row is drawn among N draws with replacement.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from matchopt.config_fields import count, learning_rate, widths
from matchopt.errors import MatchoptError
from matchopt.models.mlp import ACTIVATIONS, mlp_layers
from matchopt.models.optim import adam
from matchopt.runtime import seeded_torch_rng
from matchopt.state_checks import describe


@dataclass(frozen=True)
class EnsembleConfig:
    """Config fields of a Gaussian-ensemble surrogate, the same names in every method that fits
    one (GA, Ens-Mean/Min, CMA-ES, BO-qEI); defaults are design-baselines' CMA-ES / BO-qEI
    ensemble. A method's config subclasses it and may give other defaults."""

    n_models: int = count(5)
    """Ensemble size of the surrogate."""
    hidden: tuple[int, ...] = widths((256,))
    """Hidden layer widths of every ensemble member."""
    activation: str = field(default="leaky_relu", metadata={"choices": tuple(ACTIVATIONS)})
    """Hidden activation of the ensemble members."""
    epochs: int = count(100)
    """Training epochs of every member."""
    batch_size: int = count(100)
    """Mini-batch size of surrogate training."""
    lr: float = learning_rate(1e-3)
    """Adam learning rate of surrogate training."""


def soft_clamp(log_std: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """design-baselines' smooth clamp of a log-std between (trainable) bounds, softplus on both."""
    log_std = high - nn.functional.softplus(high - log_std)
    return low + nn.functional.softplus(log_std - low)


def gaussian_nll(mean: torch.Tensor, log_std: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Negative log likelihood of ``y`` under N(mean, exp(log_std)^2), elementwise: torch's
    ``Normal.log_prob``, without its argument checks (each a host sync per step on a GPU)."""
    return -torch.distributions.Normal(mean, log_std.exp(), validate_args=False).log_prob(y)


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
        return gaussian_nll(mean, log_std, y)


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
    """Train one member by weighted NLL with Adam over shuffled mini-batches (the stack of one
    of :func:`fit_members`); returns the epoch losses.

    The loss of a batch is ``sum(w_i * nll_i) / sum(w_i)`` with ``w`` the sample weights
    (1 if None), as design-baselines' bootstrapped training. On the CPU, rows of weight 0 (about
    37% of a bootstrap) are left out of the forward pass (``skip_zero_weights``).
    """
    return fit_members(
        [model],
        x,
        y,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        sample_weights=None if sample_weights is None else sample_weights[None],
        orders=[generator],
        progress=progress,
        stacked=False,
        desc=desc,
        skip_zero_weights=skip_zero_weights,
    )[0]


#: Members no wider than this train in lockstep as one batched network (:func:`fit_members`):
#: small matrix products leave most of a core idle, batched ones fill it (3-4x per step on the
#: 256-wide members of CMA-ES, BO-qEI and CbAS); wide members (GA's 2048) gain nothing from it
#: and keep the sequential path, which can skip zero-weight rows.
GROUPED_MAX_WIDTH = 512


def trains_grouped(hidden: Sequence[int]) -> bool:
    """Whether members of these hidden widths train in lockstep (:func:`fit_members`)."""
    return max(hidden, default=0) <= GROUPED_MAX_WIDTH


def member_orders(
    generator: torch.Generator, n_members: int, epochs: int, n_rows: int
) -> list[torch.Generator]:
    """Per member, a generator at the state where that member starts drawing its batch orders
    when ``n_members`` members train one after another from ``generator`` (:func:`fit_gaussian`:
    one permutation of ``n_rows`` per epoch); ``generator`` ends past all of them."""
    orders = []
    for _ in range(n_members):
        own = torch.Generator()
        own.set_state(generator.get_state())
        orders.append(own)
        for _ in range(epochs):
            torch.randperm(n_rows, generator=generator)
    return orders


class StackedMembers(nn.Module):
    """Members of one architecture as one batched network: every parameter stacked along a
    leading member axis, so one ``baddbmm`` per layer computes all members.

    Args:
        members: :class:`GaussianMLP` members of one architecture (their values are copied).
    """

    def __init__(self, members: Sequence[GaussianMLP]):
        super().__init__()
        layers = [[m for m in member.body if isinstance(m, nn.Linear)] for member in members]
        # Parameter-free activations: a plain list keeps them out of the state dict.
        self.activations = [m for m in members[0].body if not isinstance(m, nn.Linear)]
        self.weight = nn.ParameterList(
            nn.Parameter(torch.stack([ls[k].weight.detach().T for ls in layers]))
            for k in range(len(layers[0]))
        )  # members x in x out
        self.bias = nn.ParameterList(
            nn.Parameter(torch.stack([ls[k].bias.detach()[None] for ls in layers]))
            for k in range(len(layers[0]))
        )  # members x 1 x out
        self.max_log_std = nn.Parameter(
            torch.stack([m.max_log_std.detach() for m in members])[:, None]
        )
        self.min_log_std = nn.Parameter(
            torch.stack([m.min_log_std.detach() for m in members])[:, None]
        )

    def ordered_parameters(self) -> list[nn.Parameter]:
        """Layer by layer (weight, bias), then the std bounds: the optimizer's order."""
        pairs = [p for pair in zip(self.weight, self.bias) for p in pair]
        return pairs + [self.max_log_std, self.min_log_std]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and soft-clamped log-std (members x B) of ``x`` (members x B x d)."""
        h = x
        for k in range(len(self.weight)):
            h = torch.baddbmm(self.bias[k], h, self.weight[k])
            if k < len(self.activations):
                h = self.activations[k](h)
        mean, log_std = h.unbind(-1)
        return mean, soft_clamp(log_std, self.min_log_std, self.max_log_std)

    def unstack_into(self, members: Sequence[GaussianMLP]) -> None:
        """Copy each member's slice back into ``members``."""
        with torch.no_grad():
            for i, member in enumerate(members):
                linears = [m for m in member.body if isinstance(m, nn.Linear)]
                for k, linear in enumerate(linears):
                    linear.weight.copy_(self.weight[k][i].T)
                    linear.bias.copy_(self.bias[k][i, 0])
                member.max_log_std.copy_(self.max_log_std[i, 0])
                member.min_log_std.copy_(self.min_log_std[i, 0])


class GroupedSnapshots(Protocol):
    """Training snapshots of :func:`fit_members` (e.g. a method's
    :class:`~matchopt.checkpoints.LoopSnapshots`, adapted): ``start`` restores the parts it was
    made with and returns the epoch to go on from and the members' losses so far; ``save``
    keeps them after an epoch."""

    def start(self, n_members: int, epochs: int) -> tuple[int, list[list[float]]]: ...

    def save(self, epoch: int, epochs: int, member_losses: list[list[float]]) -> None: ...


class OneMember(nn.Module):
    """One member as a stack of one (1 x B): its own layers compute it, so that a member trained
    alone by :func:`fit_members` has the arithmetic of its own forward pass (a batched product
    of one member rounds differently from the member's linear layers)."""

    def __init__(self, member: GaussianMLP):
        super().__init__()
        self.member = member

    def ordered_parameters(self) -> list[nn.Parameter]:
        """The member's parameters, the optimizer's order."""
        return list(self.member.parameters())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and soft-clamped log-std (1 x B) of ``x`` (1 x B x d)."""
        mean, log_std = self.member(x[0])
        return mean[None], log_std[None]

    def unstack_into(self, members: Sequence[GaussianMLP]) -> None:
        """Nothing to copy: the member trained in place."""


def fit_members(
    members: Sequence[GaussianMLP],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    sample_weights: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    orders: Sequence[torch.Generator | None] | None = None,
    progress: bool = False,
    snapshots: Callable[..., GroupedSnapshots] | None = None,
    stacked: bool = True,
    desc: str = "ensemble",
    skip_zero_weights: bool = True,
) -> list[list[float]]:
    """The training loop of every Gaussian member: weighted NLL with Adam over shuffled
    mini-batches, ``members`` (one architecture) together as one batched network
    (:class:`StackedMembers`) or, with ``stacked=False``, one member alone (:class:`OneMember`).

    Every member sees the batches it would see when trained alone (its batch orders from its
    own generator in ``orders``; by default, those of training the members one after another
    from ``generator``, :func:`member_orders`), its own sample weights (``sample_weights``:
    members x rows) and its own Adam state; a batch's loss is ``sum(w_i * nll_i) / sum(w_i)``
    (design-baselines' bootstrapped training) and the loss summed over members has each
    member's loss gradient in that member's parameters. So a stack equals its members trained
    one after another up to float rounding. The members may belong to several ensembles (seeds
    as a batch dimension: :meth:`GaussianEnsemble.trained_seeds`).

    A member alone on the CPU leaves rows of weight 0 (about 37% of a bootstrap) out of its
    forward pass (``skip_zero_weights``): the same loss and gradients up to summation order, for
    1.15-1.44x less work (``benchmarks/speedups.py``); the batches are drawn over all rows, so
    the batch order and the number of optimizer steps are unchanged. A stack keeps them with
    weight 0 (one batch shape for all members), as does a GPU (finding those rows would make the
    host wait for the device at every step).

    ``snapshots(model, optimizer, orders)`` gives the loop's snapshots (a killed run goes on
    from the last one). Returns each member's loss per epoch (the losses stay on the device
    until an epoch ends: no host sync per step).
    """
    if not stacked and len(members) != 1:
        raise ValueError(f"stacked=False trains one member, got {len(members)}")
    if orders is None:  # by default, those of members trained one after another
        orders = member_orders(generator or torch.Generator(), len(members), epochs, len(x))
    orders = list(orders)
    model = StackedMembers(members) if stacked else OneMember(members[0])
    optimizer = adam(model.ordered_parameters(), lr=lr)
    weights = torch.ones(len(members), len(x)) if sample_weights is None else sample_weights
    weights = weights.float().to(x.device)
    skip_zero_rows = (
        not stacked and skip_zero_weights and x.device.type == "cpu" and bool((weights == 0).any())
    )
    loop = None if snapshots is None else snapshots(model, optimizer, orders)
    bar = {"desc": desc, "disable": not progress}
    losses = _train_epochs(
        model, optimizer, x, y, weights, orders, batch_size, epochs, skip_zero_rows, loop, bar
    )
    model.unstack_into(members)
    return losses


def _train_epochs(
    model: StackedMembers | OneMember,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    weights: torch.Tensor,
    orders: list[torch.Generator],
    batch_size: int,
    epochs: int,
    skip_zero_rows: bool,
    loop: GroupedSnapshots | None,
    bar_options: dict[str, Any],
) -> list[list[float]]:
    """The epochs of :func:`fit_members`, from the one ``loop`` restores (0 without snapshots)
    to ``epochs``, each saved to ``loop`` when it ends; returns each member's loss per epoch."""
    start, losses = 0, [[] for _ in orders]
    if loop is not None:
        start, losses = loop.start(len(orders), epochs)
    bar = tqdm(
        range(start, epochs), initial=start, total=epochs, unit="epoch", leave=False, **bar_options
    )
    for epoch in bar:
        # Drawn on the CPU (the same orders on every device).
        order = torch.stack([torch.randperm(len(x), generator=g) for g in orders]).to(x.device)
        total = _train_epoch(model, optimizer, x, y, weights, order, batch_size, skip_zero_rows)
        for own, value in zip(losses, (total / len(x)).tolist()):
            own.append(value)
        if loop is not None:
            loop.save(epoch + 1, epochs, losses)
    bar.close()
    return losses


def _train_epoch(
    model: StackedMembers | OneMember,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    weights: torch.Tensor,
    order: torch.Tensor,
    batch_size: int,
    skip_zero_rows: bool,
) -> torch.Tensor:
    """One epoch of :func:`fit_members` over the members' batch orders (members x rows);
    returns each member's loss summed over rows (float64, on the device)."""
    total = torch.zeros(len(order), dtype=torch.float64, device=x.device)
    for first in range(0, order.shape[1], batch_size):
        batch = order[:, first : first + batch_size]  # members x B
        n_rows = batch.shape[1]
        w = weights.gather(1, batch)
        if skip_zero_rows:
            # An all-zero batch leaves an empty forward pass: zero gradients and an Adam step on
            # them, exactly as the weighted loss of the full batch gives.
            kept = w[0] > 0
            batch, w = batch[:, kept], w[:, kept]
        mean, log_std = model(x[batch])  # x[batch]: members x B x d
        nll = gaussian_nll(mean, log_std, y[batch])
        member_losses = (w * nll).sum(1) / w.sum(1).clamp_min(1e-12)
        optimizer.zero_grad()
        member_losses.sum().backward()
        optimizer.step()
        total += member_losses.detach().double() * n_rows
    return total


def config_arguments(config: Any, progress: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The arguments of :meth:`GaussianEnsemble.trained` an :class:`EnsembleConfig` gives (its
    ``bootstrap`` field where it has one; True otherwise): architecture, and training but the
    seed."""
    architecture = {
        "n_models": config.n_models,
        "hidden": config.hidden,
        "activation": config.activation,
    }
    training = {
        "epochs": config.epochs,
        "batch_size": config.batch_size,
        "lr": config.lr,
        "bootstrap": getattr(config, "bootstrap", True),
        "progress": progress,
    }
    return architecture, training


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

        ``grouped``: train the members in lockstep as one batched network (:func:`fit_members`,
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
        options = {"epochs": epochs, "batch_size": batch_size, "lr": lr, "progress": progress}
        if grouped:
            fit_members(
                list(self.members),
                x,
                y,
                sample_weights=None if weights is None else torch.from_numpy(weights),
                generator=generator,
                **options,
            )
            return self
        self._fit_one_after_another(x, y, weights, generator, first_member, member_done, options)
        return self

    def _fit_one_after_another(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        weights: np.ndarray | None,
        generator: torch.Generator,
        first_member: int,
        member_done: Callable[[int], None] | None,
        options: dict[str, Any],
    ) -> None:
        """:meth:`fit` of members trained one after another from ``first_member`` on (each a
        stack of one, its batch orders drawn in turn from ``generator``)."""
        for index, member in enumerate(self.members):
            if index < first_member:
                for _ in range(options["epochs"]):  # the batch orders this member drew
                    torch.randperm(len(x), generator=generator)
                continue
            fit_members(
                [member],
                x,
                y,
                sample_weights=None if weights is None else torch.from_numpy(weights[[index]]),
                orders=[generator],
                stacked=False,
                desc=f"member {index + 1}/{len(self.members)}",
                **options,
            )
            if member_done is not None:
                member_done(index + 1)

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
        cls, x: torch.Tensor, y: torch.Tensor, config: Any, seed: int, progress: bool = False
    ) -> GaussianEnsemble:
        """:meth:`trained` with the fields of an :class:`EnsembleConfig` (and its ``bootstrap``
        field where the config has one; True otherwise)."""
        architecture, fields = config_arguments(config, progress)
        return cls.trained(x, y, **architecture, **fields, seed=seed)

    @classmethod
    def untrained(cls, x: torch.Tensor, config: Any, seed: int) -> GaussianEnsemble:
        """:meth:`initialized` with the architecture of an :class:`EnsembleConfig`, for features
        ``x`` (its width and device): the start of :meth:`from_config`, e.g. to fill with
        members trained elsewhere (``load_state_dict``)."""
        architecture, _ = config_arguments(config, False)
        return cls.initialized(x.shape[1], **architecture, seed=seed, device=x.device)

    @classmethod
    def trained_seeds(
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
        seeds: Sequence[int],
        bootstrap: bool = True,
        progress: bool = False,
        snapshots: Callable[..., GroupedSnapshots] | None = None,
    ) -> tuple[list[GaussianEnsemble], list[list[float]]]:
        """One ensemble per seed, each as :meth:`trained` gives it up to float rounding, all
        trained at once: the members of every seed in lockstep as one batched network
        (:func:`fit_members`: one GPU step for all seeds). Each seed keeps its own
        initialization, bootstrap and batch orders (from its own generators, as its
        :meth:`fit`). Returns the frozen ensembles and each member's epoch losses (seed-major).
        """
        ensembles, members, weights, orders = [], [], [], []
        for seed in seeds:
            ensemble = cls.initialized(
                x.shape[1],
                n_models=n_models,
                hidden=hidden,
                activation=activation,
                seed=seed,
                device=x.device,
            )
            ensembles.append(ensemble)
            members += list(ensemble.members)
            rng = np.random.default_rng(seed)  # as fit(): bootstrap first, then batch orders
            if bootstrap:
                weights.append(bootstrap_weights(len(x), n_models, rng))
            generator = torch.Generator().manual_seed(seed)
            orders += member_orders(generator, n_models, epochs, len(x))
        losses = fit_members(
            members,
            x,
            y,
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            sample_weights=torch.from_numpy(np.concatenate(weights)) if bootstrap else None,
            orders=orders,
            progress=progress,
            snapshots=snapshots,
        )
        return [e.eval().requires_grad_(False) for e in ensembles], losses

    @classmethod
    def from_config_seeds(
        cls,
        x: torch.Tensor,
        y: torch.Tensor,
        config: Any,
        seeds: Sequence[int],
        progress: bool = False,
        snapshots: Callable[..., GroupedSnapshots] | None = None,
    ) -> list[GaussianEnsemble]:
        """:meth:`trained_seeds` with the fields of an :class:`EnsembleConfig`: the frozen
        ensembles, one per seed."""
        architecture, fields = config_arguments(config, progress)
        ensembles, _ = cls.trained_seeds(
            x, y, **architecture, **fields, seeds=seeds, snapshots=snapshots
        )
        return ensembles

    def member_means(self, x: torch.Tensor) -> torch.Tensor:
        """Predicted means of every member (n_models x n)."""
        return torch.stack([member(x)[0] for member in self.members])

    def predict_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Mean over members of the predicted means (n,)."""
        return self.member_means(x).mean(0)
