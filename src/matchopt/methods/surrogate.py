"""Plumbing of the methods that search a Gaussian-ensemble surrogate (GA, Ens-Mean/Min, CMA-ES,
BO-qEI): fit the encoder and the ensemble, predict with the ensemble mean. Each method's own
search stays in its own file."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from matchopt.data import OfflineData
from matchopt.encodings import DesignEncoder
from matchopt.methods.base import Method
from matchopt.methods.seed_batch import SeedBatch, seed_losses_check
from matchopt.methods.wrappers import fit_all_or_nothing
from matchopt.models.ensemble_cache import EnsembleCache
from matchopt.shared_ensembles import shared_ensemble, shared_seed_ensembles


class EnsembleSurrogateMethod(Method):
    """A method whose config is an :class:`~matchopt.models.EnsembleConfig` and whose surrogate
    is a :class:`~matchopt.models.GaussianEnsemble` fitted on z-scored features and scores.

    Attributes:
        ensemble_: the trained ensemble (frozen).
        encoder_: maps designs to normalized features and back.
    """

    has_surrogate = True
    batches_seeds = True

    def _prepare(
        self, data: OfflineData
    ) -> tuple[torch.Tensor, torch.Tensor, EnsembleCache | None]:
        """Fit the encoder; the normalized features and scores on the device, and the ensemble
        cache (None without a folder)."""
        self.encoder_ = DesignEncoder(data.space).fit(data.x, data.y)
        features = torch.from_numpy(self.encoder_.encode_x(data.x)).to(self.device_)
        scores = torch.from_numpy(self.encoder_.encode_y(data.y)).to(self.device_)
        folder = self.context.ensemble_folder
        cache = None if folder is None else EnsembleCache(folder)
        return features, scores, cache

    @fit_all_or_nothing
    def fit(self, data: OfflineData) -> EnsembleSurrogateMethod:
        features, scores, cache = self._prepare(data)
        self.ensemble_ = shared_ensemble(
            features,
            scores,
            self.config_,
            self.seed,
            self.progress,
            cache,
            self.context.seed_batch,
        )
        self.data_ = data
        return self

    @classmethod
    def _fit_seeds(
        cls, methods: Sequence[EnsembleSurrogateMethod], data: OfflineData, run: SeedBatch
    ) -> None:
        """:meth:`fit` of every seed at once: all seeds' ensemble members trained in lockstep
        (:func:`~matchopt.shared_ensembles.shared_seed_ensembles`), each seed from its own
        generators; with an ensemble folder (:meth:`share_ensembles`), stored there for the
        methods of the same training fields and seeds."""
        first = methods[0]
        features, scores, cache = first._prepare(data)

        def snapshots(model, optimizer, orders):  # noqa: ANN001, ANN202 (fit_members's parts)
            return _BatchSnapshots(run, data, model, optimizer, orders)

        ensembles = shared_seed_ensembles(
            features,
            scores,
            first.config_,
            [m.seed for m in methods],
            first.progress,
            cache,
            snapshots,
        )
        for method, ensemble in zip(methods, ensembles):  # the same data: the same encoder
            method.encoder_, method.ensemble_, method.data_ = first.encoder_, ensemble, data

    def fit_report(self) -> dict:
        """Where the ensemble came from, when it was shared through a cache (bench grids)."""
        shared = getattr(self.ensemble_, "shared_", None) if hasattr(self, "ensemble_") else None
        return {"shared_ensemble": shared} if shared else {}

    def resumed_seconds(self) -> float:
        """Also the training of members that an earlier sitting left in the ensemble cache."""
        shared = getattr(getattr(self, "ensemble_", None), "shared_", None) or {}
        return super().resumed_seconds() + float(shared.get("earlier_seconds", 0.0))

    def _predict_features(self, x: np.ndarray) -> np.ndarray:
        """Surrogate score (n,) of normalized features (n x d): the ensemble mean."""
        with torch.no_grad():
            return self.ensemble_.predict_mean(self._to_model_device(x)).cpu().numpy()

    def _to_model_device(self, x: np.ndarray) -> torch.Tensor:
        """Normalized features (n x d) as a tensor where the ensemble lives."""
        return torch.from_numpy(x).to(next(self.ensemble_.parameters()).device)

    def predict(self, designs: np.ndarray) -> np.ndarray:
        """Surrogate predictions (n,) of designs, in the units of the offline y."""
        self._check_fitted()
        designs = self.data_.space.validate(designs)
        return self.encoder_.decode_y(self._predict_features(self.encoder_.encode_x(designs)))


class _BatchSnapshots:
    """:func:`~matchopt.models.gaussian.fit_members`'s snapshots of a seed batch: the stacked
    members, their optimizer and batch-order generators, and every member's losses."""

    def __init__(self, run: SeedBatch, data: OfflineData, model, optimizer, orders) -> None:  # noqa: ANN001
        parts = {f"order{k}": g for k, g in enumerate(orders)}
        self.loop = run.snapshots(data, model=model, optimizer=optimizer, **parts)

    def start(self, n_members: int, epochs: int) -> tuple[int, list[list[float]]]:
        start = self.loop.start([], epochs, check=seed_losses_check(n_members))
        saved = self.loop.saved.get("seed_losses", [[] for _ in range(n_members)])
        return start, [list(own) for own in saved]

    def save(self, epoch: int, epochs: int, member_losses: list[list[float]]) -> None:
        self.loop.save(
            epoch,
            epochs,
            losses=list(member_losses[0]),
            seed_losses=[list(own) for own in member_losses],
        )
