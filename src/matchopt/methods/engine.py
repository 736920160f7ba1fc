"""How a method runs, kept apart from what it is: the run context (training snapshots,
Gaussian ensembles shared between bench cells) and the training it hands to a method.

The runner and the bench own a :class:`RunContext` and give it to a method
(``method.run = context``, :attr:`~matchopt.methods.base.Method.run`). A method that trains
through :meth:`~matchopt.methods.training.SeedBatchable._train` is handed a
:class:`TrainingRun`: the training's identity (class, config, seeds) and the services of its
context (:meth:`TrainingRun.snapshots`, :meth:`TrainingRun.ensemble_cache`). This module knows
methods only by what a :class:`RunMember` has, so that it imports none of them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from matchopt.checkpoints import LoopSnapshots, TrainingCheckpoint, loop_snapshots, run_key
from matchopt.data import OfflineData
from matchopt.models.ensemble_cache import EnsembleCache


@dataclasses.dataclass(frozen=True)
class RunContext:
    """How one run executes, beside what its method is (config, seed, device): made by the
    runner and the bench, given to the method as its :attr:`~matchopt.methods.base.Method.run`.
    The default is a plain fit: no snapshots, an ensemble of one's own.

    Attributes:
        snapshot: the run's training-snapshot file (:mod:`matchopt.checkpoints`): a killed
            run continues from it and gives the designs of an uninterrupted run.
        ensemble_folder: Gaussian ensembles shared between runs
            (:mod:`matchopt.models.ensemble_cache`): one trained with the same data, fields and
            seed is taken from there, or trained and left there.
        seed_batch: with ``ensemble_folder``, take this seed's ensemble from a batch of these
            seeds (:func:`~matchopt.methods.training.fit_seeds`) where the folder holds it.
    """

    snapshot: TrainingCheckpoint | None = None
    ensemble_folder: Path | None = None
    seed_batch: tuple[int, ...] | None = None

    @classmethod
    def of(
        cls,
        snapshot: str | os.PathLike | None = None,
        ensemble_folder: str | os.PathLike | None = None,
        seed_batch: Sequence[int] | None = None,
        every: float | None = None,
    ) -> RunContext:
        """A context from paths: snapshots in the file ``snapshot`` (every ``every`` seconds,
        default ``$MATCHOPT_CHECKPOINT_SECONDS`` or 300), ensembles in ``ensemble_folder``."""
        return cls(
            snapshot=None if snapshot is None else TrainingCheckpoint(snapshot, every),
            ensemble_folder=None if ensemble_folder is None else Path(ensemble_folder),
            seed_batch=None if seed_batch is None else tuple(int(s) for s in seed_batch),
        )

    @property
    def resumed_seconds(self) -> float:
        """Seconds of training in earlier sittings, when a fit continued a killed run from a
        snapshot (:mod:`matchopt.checkpoints`); 0 for a fit in one sitting."""
        return self.snapshot.earlier_seconds if self.snapshot is not None else 0.0


class KeepsSnapshots:
    """Marks the methods that keep training snapshots (the mixins of
    :mod:`matchopt.methods.training`): others are given a context without a snapshot file."""


class RunMember(Protocol):
    """What the engine reads of a method of a training: its seed, its config and its run."""

    seed: int

    @property
    def config_(self) -> Any: ...

    @property
    def run(self) -> RunContext: ...


@dataclasses.dataclass(frozen=True)
class TrainingRun:
    """One training of a method, as the engine hands it to ``_train``: a plain fit (a batch of
    one seed) or several seeds trained at once, with the services of its run context.

    Attributes:
        name: the method's class name.
        config: the config all seeds share.
        seeds: the seed of a plain fit, or the seeds of a batch (the training's identity,
            :func:`~matchopt.checkpoints.run_key`).
        context: the run context of the first method (the batch's one snapshot file).
    """

    name: str
    config: Any
    seeds: int | tuple[int, ...]
    context: RunContext = RunContext()

    @classmethod
    def of(cls, batch: Sequence[RunMember]) -> TrainingRun:
        """The training of ``batch`` (one class and config): one method is a plain fit."""
        first = batch[0]
        seeds = first.seed if len(batch) == 1 else tuple(m.seed for m in batch)
        return cls(type(first).__name__, first.config_, seeds, first.run)

    def checkpoint(self, data: OfflineData) -> TrainingCheckpoint | None:
        """The context's snapshot file bound to this training on ``data`` (None: no file), for
        states that are not a training loop's (CMA-ES's finished groups of runs)."""
        checkpoint = self.context.snapshot
        if checkpoint is not None:
            checkpoint.bind(run_key(self.name, self.config, self.seeds, data.x, data.y))
        return checkpoint

    def snapshots(self, data: OfflineData, stage: str = "main", **parts: Any) -> LoopSnapshots:
        """The snapshots of one training loop (``stage`` tells apart several loops of one fit)
        over ``parts`` (modules, optimizers, generators): inert without a snapshot file
        (:class:`~matchopt.checkpoints.LoopSnapshots`)."""
        return loop_snapshots(
            self.context.snapshot, self.name, self.config, self.seeds, data, stage, parts
        )

    def ensemble_cache(self) -> EnsembleCache | None:
        """The Gaussian ensembles shared through the context's folder (None: none)."""
        folder = self.context.ensemble_folder
        return None if folder is None else EnsembleCache(folder)
