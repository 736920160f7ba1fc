"""The opt-in parts of the method contract: resuming killed runs and training seeds as a batch.

A method lists what it supports among its bases::

    class MyMethod(Resumable, SeedBatchable):
        @classmethod
        def _train(cls, batch, data, run): ...  # one loop for a fit and for a seed batch

* :class:`Resumable`: ``fit`` keeps training snapshots in the snapshot file of its run context
  (:attr:`~matchopt.methods.base.Method.run`), so a killed run continues where it stopped and
  gives the designs of an uninterrupted run; :meth:`Resumable.resume_from` sets that file.
* :class:`SeedBatchable`: the method's training is :meth:`SeedBatchable._train`, the one entry
  point the engine calls, for a plain fit (a batch of one) and for several seeds at once
  (:func:`fit_seeds`), with a :class:`~matchopt.methods.engine.TrainingRun` whose services
  (snapshots, shared ensembles) the engine owns.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TypeVar

from matchopt.checkpoints import TrainingCheckpoint
from matchopt.data import OfflineData
from matchopt.errors import MatchoptError
from matchopt.methods.base import Method
from matchopt.methods.engine import KeepsSnapshots, TrainingRun
from matchopt.methods.wrappers import fit_all_or_nothing, forget_learned
from matchopt.runtime import default_threads_unless_chosen

R = TypeVar("R", bound="Resumable")
M = TypeVar("M", bound=Method)


class Resumable(Method, KeepsSnapshots):
    """A method whose training (or search) keeps snapshots in its run's snapshot file."""

    def resume_from(self: R, path: str | os.PathLike, every: float | None = None) -> R:
        """Keep training snapshots in ``path`` (every ``every`` seconds): a fit continues from
        one of this run if present. The file keeps the finished training after ``fit`` (a killed
        search then needs no retraining): remove it once the results are stored. Returns
        self."""
        self.run = dataclasses.replace(self.run, snapshot=TrainingCheckpoint(path, every))
        return self


class SeedBatchable(Method, KeepsSnapshots):
    """A method that trains through :meth:`_train`, one seed or several at once (seeds as a
    batch dimension), each seed as its own fit would, up to float round-off."""

    @fit_all_or_nothing
    def fit(self: M, data: OfflineData) -> M:
        """Learn from the offline data (:meth:`_train` of a batch of one); returns self."""
        type(self)._train([self], data, TrainingRun.of([self]))
        return self

    @classmethod
    def _train(cls, batch: Sequence[SeedBatchable], data: OfflineData, run: TrainingRun) -> None:
        """Train every method of ``batch`` (this class, one config and device, distinct seeds)
        on ``data``, leaving each fitted. ``run`` is the training's identity and the services
        of its context: :meth:`TrainingRun.snapshots` for the loop's snapshots (one file for
        the batch), :meth:`TrainingRun.ensemble_cache` for shared ensembles."""
        raise NotImplementedError


def fit_seeds(methods: Sequence[M], data: OfflineData) -> list[M]:
    """Fit ``methods`` (one class, config and device, distinct seeds) on ``data``.

    Where the class is :class:`SeedBatchable`, all seeds train at once as one batched network
    (a GPU then launches one step for all), each seed with its own random draws, so that each
    ends as its own ``fit`` would, up to float round-off; training snapshots go to the first
    method's snapshot file (its run's), one for the batch. Other methods fit one seed after the
    other. Returns the methods, fitted.

    Raises:
        MatchoptError: no methods, methods of several classes, configs or devices, or repeated
            seeds.
    """
    methods = list(methods)
    _check_batch(methods)
    cls = type(methods[0])
    if not issubclass(cls, SeedBatchable) or len(methods) == 1:
        for method in methods:
            method.fit(data)
        return methods
    for method in methods:
        forget_learned(method)
    try:
        with default_threads_unless_chosen():
            cls._train(methods, data, TrainingRun.of(methods))
    except BaseException:  # all or nothing, as fit
        for method in methods:
            forget_learned(method)
        raise
    return methods


def _check_batch(methods: list[Method]) -> None:
    """Raise unless ``methods`` can train together (:func:`fit_seeds`)."""
    if not methods:
        raise MatchoptError("fit_seeds needs at least one method")
    first = methods[0]
    for method in methods:
        if type(method) is not type(first):
            raise MatchoptError(
                f"fit_seeds got a {type(method).__name__} beside a {type(first).__name__}"
            )
        if method.config_ != first.config_ or method.device_ != first.device_:
            raise MatchoptError("fit_seeds needs one config and one device for all seeds")
    seeds = [m.seed for m in methods]
    if len(set(seeds)) != len(seeds):
        raise MatchoptError(f"fit_seeds got repeated seeds: {seeds}")
