"""What runs a method beyond its contract, kept apart from it: training snapshots, Gaussian
ensembles shared between bench cells, and seeds trained as one batch.

:class:`~matchopt.methods.base.Method` inherits it; the runner and the bench call it
(``resume_from``, ``share_ensembles``, ``fit_seeds``), a method's own code only reads what they
set (``training_checkpoint``, ``ensemble_cache``, ``ensemble_seed_batch``) and, where it trains
seeds as a batch, implements ``_fit_seeds``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from matchopt.data import OfflineData
from matchopt.errors import MatchoptError
from matchopt.methods.seed_batch import SeedBatch
from matchopt.methods.wrappers import forget_learned
from matchopt.runtime import default_threads_unless_chosen

if TYPE_CHECKING:
    from matchopt.checkpoints import TrainingCheckpoint
    from matchopt.methods.base import Method


class RunSupport:
    """Snapshots, shared ensembles and seed batches of a method's runs (module notes)."""

    #: ``fit`` keeps training snapshots when given one (:meth:`resume_from`), so a killed run
    #: continues where it stopped and gives the designs of an uninterrupted run.
    resumable: ClassVar[bool] = False
    #: The snapshot file of this run (:meth:`resume_from`); None: no snapshots.
    training_checkpoint: TrainingCheckpoint | None = None
    #: Folder of shared Gaussian ensembles (:meth:`share_ensembles`); None: train one's own.
    ensemble_cache: Path | None = None
    #: The seed batch whose shared ensemble to take (:meth:`share_ensembles`); None: none.
    ensemble_seed_batch: tuple[int, ...] | None = None
    #: :meth:`fit_seeds` trains several seeds at once (seeds as a batch dimension), each as
    #: its own ``fit`` would, up to float round-off.
    batches_seeds: ClassVar[bool] = False

    def resumed_seconds(self) -> float:
        """Seconds this fit trained in earlier sittings, when it continued a killed run from a
        snapshot (:mod:`matchopt.checkpoints`); 0 for a fit in one sitting. Run records add them
        to ``fit_seconds``, so that a resumed run reports the time of its whole training."""
        checkpoint = self.training_checkpoint
        return checkpoint.earlier_seconds if checkpoint is not None else 0.0

    def resume_from(self, path: str | os.PathLike, every: float | None = None) -> Method:
        """Keep training snapshots in ``path`` (every ``every`` seconds, default
        ``$MATCHOPT_CHECKPOINT_SECONDS`` or 300) and continue from one of this run if present.
        The file keeps the finished training after ``fit`` (a killed search then needs no
        retraining): remove it once the results are stored.

        Only methods with ``resumable`` use it (and, for the batch of :meth:`fit_seeds`, those
        that ``batches_seeds``); for the others it changes nothing. Returns self.
        """
        from matchopt.checkpoints import TrainingCheckpoint

        keeps = self.resumable or self.batches_seeds
        self.training_checkpoint = TrainingCheckpoint(path, every) if keeps else None
        return self

    def share_ensembles(
        self, folder: str | os.PathLike | None, seed_batch: Sequence[int] | None = None
    ) -> Method:
        """Take a Gaussian-ensemble surrogate trained with the same data, fields and seed from
        ``folder`` (:mod:`matchopt.models.ensemble_cache`), or train it and leave it there.
        With ``seed_batch``, the one trained for this seed in a batch of these seeds
        (:meth:`fit_seeds`) where the folder holds it.

        ``matchopt bench`` does this for cells that share an ensemble (GA, Ens-Mean and Ens-Min;
        CMA-ES and BO-qEI). Methods without such a surrogate ignore it. Returns self.
        """
        self.ensemble_cache = None if folder is None else Path(folder)
        self.ensemble_seed_batch = None if seed_batch is None else tuple(seed_batch)
        return self

    @classmethod
    def fit_seeds(cls, methods: Sequence[Method], data: OfflineData) -> list[Method]:
        """Fit ``methods`` (this class, one config and device, distinct seeds) on ``data``.

        Where the method ``batches_seeds``, all seeds train at once as one batched network (a
        GPU then launches one step for all), each seed with its own random draws, so
        that each ends as its own :meth:`fit` would, up to float round-off; training snapshots
        go to the first method's snapshot file (:meth:`resume_from`), one for the batch. Other
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
        run = SeedBatch(cls.__name__, first.config_, tuple(seeds), first.training_checkpoint)
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
