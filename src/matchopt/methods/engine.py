"""How a method runs, kept apart from what it is: the run context (training snapshots,
Gaussian ensembles shared between bench cells) and seeds trained as one batch.

The runner and the bench own a :class:`RunContext` and hand it to a method
(:meth:`RunSupport.in_context`); a method's code reads it as ``self.context`` and asks
:meth:`RunSupport.snapshots` for its training loop's snapshots. Methods that train seeds as a
batch implement ``_fit_seeds`` (:meth:`RunSupport.fit_seeds`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from matchopt.checkpoints import LoopSnapshots, TrainingCheckpoint, loop_snapshots, run_key
from matchopt.data import OfflineData
from matchopt.errors import MatchoptError
from matchopt.methods.seed_batch import SeedBatch
from matchopt.methods.wrappers import forget_learned
from matchopt.runtime import default_threads_unless_chosen

if TYPE_CHECKING:
    from matchopt.methods.base import Method


@dataclasses.dataclass(frozen=True)
class RunContext:
    """How one run executes, beside what its method is (config, seed, device): made by the
    runner and the bench, handed to the method by :meth:`RunSupport.in_context`. The default is
    a plain fit: no snapshots, an ensemble of one's own.

    Attributes:
        snapshot: the run's training-snapshot file (:mod:`matchopt.checkpoints`): a killed
            run continues from it and gives the designs of an uninterrupted run.
        ensemble_folder: Gaussian ensembles shared between runs
            (:mod:`matchopt.models.ensemble_cache`): one trained with the same data, fields and
            seed is taken from there, or trained and left there.
        seed_batch: with ``ensemble_folder``, take this seed's ensemble from a batch of these
            seeds (:meth:`RunSupport.fit_seeds`) where the folder holds it.
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


class RunSupport:
    """The run context of a method, its snapshots and its seed batches (module notes)."""

    #: ``fit`` keeps training snapshots when its context has a snapshot file, so a killed run
    #: continues where it stopped and gives the designs of an uninterrupted run.
    resumable: ClassVar[bool] = False
    #: :meth:`fit_seeds` trains several seeds at once (seeds as a batch dimension), each as
    #: its own ``fit`` would, up to float round-off.
    batches_seeds: ClassVar[bool] = False
    #: How this method runs (:meth:`in_context`); the class default is a plain fit.
    context: RunContext = RunContext()

    def in_context(self, context: RunContext) -> Method:
        """Run within ``context`` from now on. Its snapshot file is kept only by methods that
        use one (``resumable``, or ``batches_seeds`` for :meth:`fit_seeds`); its ensemble folder
        only by methods with a Gaussian-ensemble surrogate (others ignore it). Returns self."""
        if context.snapshot is not None and not (self.resumable or self.batches_seeds):
            context = dataclasses.replace(context, snapshot=None)
        self.context = context
        return self

    def resume_from(self, path: str | os.PathLike, every: float | None = None) -> Method:
        """:meth:`in_context` with training snapshots in ``path`` (every ``every`` seconds):
        a fit continues from one of this run if present. The file keeps the finished training
        after ``fit`` (a killed search then needs no retraining): remove it once the results
        are stored. Returns self."""
        snapshot = TrainingCheckpoint(path, every)
        return self.in_context(dataclasses.replace(self.context, snapshot=snapshot))

    def share_ensembles(
        self, folder: str | os.PathLike | None, seed_batch: Sequence[int] | None = None
    ) -> Method:
        """:meth:`in_context` with Gaussian ensembles shared through ``folder`` (None: none),
        and with ``seed_batch``, the one trained for this seed in a batch of these seeds.
        ``matchopt bench`` does this for cells that share an ensemble (GA, Ens-Mean and Ens-Min;
        CMA-ES and BO-qEI). Returns self."""
        shared = RunContext.of(ensemble_folder=folder, seed_batch=seed_batch)
        return self.in_context(
            dataclasses.replace(
                self.context, ensemble_folder=shared.ensemble_folder, seed_batch=shared.seed_batch
            )
        )

    def run_key(self, data: OfflineData) -> str:
        """This run's identity (class, config, seed, offline data) that its snapshots carry."""
        return run_key(type(self).__name__, self.config_, self.seed, data.x, data.y)

    def snapshots(self, data: OfflineData, stage: str = "main", **parts: Any) -> LoopSnapshots:
        """The snapshots of one training loop of this run (``stage`` tells apart several loops
        of one fit) over ``parts`` (modules, optimizers, generators): inert without a snapshot
        file in the context (:class:`~matchopt.checkpoints.LoopSnapshots`)."""
        return loop_snapshots(
            self.context.snapshot, type(self).__name__, self.config_, self.seed, data, stage, parts
        )

    def resumed_seconds(self) -> float:
        """Seconds this fit trained in earlier sittings, when it continued a killed run from a
        snapshot (:mod:`matchopt.checkpoints`); 0 for a fit in one sitting. Run records add them
        to ``fit_seconds``, so that a resumed run reports the time of its whole training."""
        checkpoint = self.context.snapshot
        return checkpoint.earlier_seconds if checkpoint is not None else 0.0

    @classmethod
    def fit_seeds(cls, methods: Sequence[Method], data: OfflineData) -> list[Method]:
        """Fit ``methods`` (this class, one config and device, distinct seeds) on ``data``.

        Where the method ``batches_seeds``, all seeds train at once as one batched network (a
        GPU then launches one step for all), each seed with its own random draws, so
        that each ends as its own :meth:`fit` would, up to float round-off; training snapshots
        go to the first method's snapshot file (its context's), one for the batch. Other
        methods fit one seed after the other. Returns the methods, fitted.

        Raises:
            MatchoptError: methods of another class, config or device, or repeated seeds.
        """
        methods = list(methods)
        if not methods:
            raise MatchoptError("fit_seeds needs at least one method")
        first = methods[0]
        for method in methods:
            if type(method) is not cls:
                raise MatchoptError(f"fit_seeds of {cls.__name__} got a {type(method).__name__}")
            if method.config_ != first.config_ or method.device_ != first.device_:
                raise MatchoptError("fit_seeds needs one config and one device for all seeds")
        seeds = [m.seed for m in methods]
        if len(set(seeds)) != len(seeds):
            raise MatchoptError(f"fit_seeds got repeated seeds: {seeds}")
        if not cls.batches_seeds or len(methods) == 1:
            for method in methods:
                method.fit(data)
            return methods
        run = SeedBatch(cls.__name__, first.config_, tuple(seeds), first.context.snapshot)
        for method in methods:
            forget_learned(method)
        try:
            with default_threads_unless_chosen():
                cls._fit_seeds(methods, data, run)
        except BaseException:  # all or nothing, as fit
            for method in methods:
                forget_learned(method)
            raise
        return methods

    @classmethod
    def _fit_seeds(cls, methods: Sequence[Method], data: OfflineData, run: SeedBatch) -> None:
        """The batched training of :meth:`fit_seeds` (methods with ``batches_seeds``); ``run``
        keys its snapshots (:class:`~matchopt.checkpoints.LoopSnapshots`)."""
        raise NotImplementedError
