"""Gaussian ensembles shared between runs through a folder: which trained ensemble a run takes
from there, when it trains one and leaves it there, and what its record says about it.

A run's context (:class:`~matchopt.methods.RunContext`) names the folder: ``matchopt bench``
hands one to the cells that fit the same ensemble (GA, Ens-Mean and Ens-Min; CMA-ES and BO-qEI:
:func:`~matchopt.bench.grid.plan_jobs`), and removes it once they are done; the ``auto`` method
shares one between its members. The folder is an
:class:`~matchopt.models.ensemble_cache.EnsembleCache`; the ensembles are those
:class:`~matchopt.models.GaussianEnsemble` trains and loads (that layer knows nothing of
folders shared between runs, nor of the runs).

What happened is ``shared_`` of each ensemble returned here, which the method's record carries
as ``extra.fit.shared_ensemble``: ``from_cache`` (read, not trained), ``train_seconds`` (the
training it took, where it was trained; in a batch of seeds, the seed's share of the batch),
``seed_batch`` (the seeds of the batch it was trained in), and for members trained one after
another, ``resumed_members`` and ``earlier_seconds`` (members an earlier, killed run left in the
folder, and their training seconds).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from matchopt.models.ensemble_cache import EnsembleCache, ensemble_key
from matchopt.models.gaussian import (
    GaussianEnsemble,
    GroupedSnapshots,
    config_arguments,
    trains_grouped,
)


def shared_ensemble(
    x: torch.Tensor,
    y: torch.Tensor,
    config: Any,
    seed: int,
    progress: bool = False,
    cache: EnsembleCache | None = None,
    seed_batch: Sequence[int] | None = None,
) -> GaussianEnsemble:
    """The frozen ensemble of an :class:`~matchopt.models.EnsembleConfig` and ``seed`` fitted on
    (x, y) (:meth:`~matchopt.models.GaussianEnsemble.from_config`), shared through ``cache``.

    With ``cache`` and ``seed_batch``, the first ``n_models`` members of this seed's ensemble
    from a batch of those seeds (:func:`shared_seed_ensembles`), when the cache holds as many;
    otherwise as without a batch. With ``cache``, the first ``n_models`` members of an ensemble
    trained on the same data with the same fields and seed are taken from it (the same
    members, bit for bit, see :mod:`matchopt.models.ensemble_cache`); otherwise the trained
    ensemble is stored there, member after member.
    """
    if cache is None:
        return GaussianEnsemble.from_config(x, y, config, seed, progress)
    if seed_batch is not None:
        key = ensemble_key(x, y, config, seed, False, seed_batch=seed_batch)
        ensemble = GaussianEnsemble.untrained(x, config, seed)
        done, seconds = cache.load(key, ensemble)
        if done >= len(ensemble.members):
            ensemble.shared_ = {
                "from_cache": True,
                "train_seconds": seconds,
                "seed_batch": [int(s) for s in seed_batch],
            }
            return _frozen(ensemble)
    return _trained_or_read(x, y, config, seed, progress, cache)


def _trained_or_read(
    x: torch.Tensor,
    y: torch.Tensor,
    config: Any,
    seed: int,
    progress: bool,
    cache: EnsembleCache,
) -> GaussianEnsemble:
    """:func:`shared_ensemble` of one seed trained alone: read from ``cache`` when it holds
    every member, else trained from the first member it lacks (members trained one after
    another; all of them when they train in lockstep), each member stored when trained."""
    _, fields = config_arguments(config, progress)
    grouped = trains_grouped(config.hidden)
    key = ensemble_key(x, y, config, seed, grouped)
    ensemble = GaussianEnsemble.untrained(x, config, seed)
    n = len(ensemble.members)
    done, earlier = cache.load(key, ensemble)
    if done >= n:
        ensemble.shared_ = {"from_cache": True, "train_seconds": earlier}
        return _frozen(ensemble)
    if grouped:
        done = 0  # members trained in lockstep are not a prefix of a larger ensemble
    start = time.perf_counter()

    def member_done(k: int) -> None:  # each finished member survives a kill
        cache.store(key, ensemble, k, earlier + time.perf_counter() - start)

    ensemble.fit(x, y, **fields, seed=seed, first_member=done, member_done=member_done)
    seconds = earlier + time.perf_counter() - start
    if grouped:  # fit() reports members trained one after another only
        cache.store(key, ensemble, n, seconds)
    ensemble.shared_ = {
        "from_cache": False,
        "train_seconds": seconds,
        "resumed_members": done,
        "earlier_seconds": earlier if done else 0.0,  # training of the resumed members
    }
    return _frozen(ensemble)


def shared_seed_ensembles(
    x: torch.Tensor,
    y: torch.Tensor,
    config: Any,
    seeds: Sequence[int],
    progress: bool = False,
    cache: EnsembleCache | None = None,
    snapshots: Callable[..., GroupedSnapshots] | None = None,
) -> list[GaussianEnsemble]:
    """The frozen ensembles of ``seeds`` trained as one batch
    (:meth:`~matchopt.models.GaussianEnsemble.from_config_seeds`; ``snapshots``: its training
    loop's), shared through ``cache``.

    With ``cache``, the seeds' ensembles are read from it when it holds every one of them
    (stored by an earlier batch of the same seeds, under keys naming the batch:
    :func:`~matchopt.models.ensemble_cache.ensemble_key`); otherwise the batch trains and
    stores them, and runs of the same training fields asking for at most ``n_models`` members
    of one of its seeds read theirs from there (:func:`shared_ensemble` with ``seed_batch``).
    ``train_seconds`` of each is the seed's share of the batch.
    """
    keys = [ensemble_key(x, y, config, s, False, seed_batch=seeds) for s in seeds]
    if cache is not None:
        ensembles = [GaussianEnsemble.untrained(x, config, s) for s in seeds]
        loaded = [cache.load(k, e) for k, e in zip(keys, ensembles)]
        if all(done >= config.n_models for done, _ in loaded):
            for ensemble, (_, seconds) in zip(ensembles, loaded):
                ensemble.shared_ = {
                    "from_cache": True,
                    "train_seconds": seconds,
                    "seed_batch": list(seeds),
                }
            return [_frozen(e) for e in ensembles]
    start = time.perf_counter()
    ensembles = GaussianEnsemble.from_config_seeds(x, y, config, seeds, progress, snapshots)
    share = (time.perf_counter() - start) / len(seeds)
    for key, ensemble in zip(keys, ensembles):
        if cache is not None:
            cache.store(key, ensemble, config.n_models, share)
        ensemble.shared_ = {"from_cache": False, "train_seconds": share, "seed_batch": list(seeds)}
    return ensembles


def _frozen(ensemble: GaussianEnsemble) -> GaussianEnsemble:
    """``ensemble`` in eval mode with no parameter gradients, as trained ensembles are."""
    return ensemble.eval().requires_grad_(False)
