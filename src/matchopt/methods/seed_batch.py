"""Seeds trained as one batch (:meth:`~matchopt.methods.base.Method.fit_seeds`): what the
batch's training snapshots know of it, and the per-epoch bookkeeping of a batched loop."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from matchopt.checkpoints import LoopSnapshots, loop_snapshots

if TYPE_CHECKING:
    from matchopt.checkpoints import TrainingCheckpoint


@dataclasses.dataclass(frozen=True)
class SeedBatch:
    """Several seeds of one method trained at once (:meth:`Method.fit_seeds`): the method's
    class name, config and seeds (the batch's identity, :func:`~matchopt.checkpoints.run_key`)
    and its one snapshot file (None: no snapshots)."""

    run_name: str
    config: Any
    seeds: tuple[int, ...]
    snapshot: TrainingCheckpoint | None = None

    def snapshots(self, data: Any, stage: str = "main", **parts: Any) -> LoopSnapshots:
        """The snapshots of the batch's training loop over ``parts`` (as a method's own
        :meth:`~matchopt.methods.engine.RunSupport.snapshots`)."""
        return loop_snapshots(
            self.snapshot, self.run_name, self.config, self.seeds, data, stage, parts
        )


def seed_losses_check(n_seeds: int) -> Callable[[dict[str, Any], int], str | None]:
    """A snapshot check (:meth:`~matchopt.checkpoints.LoopSnapshots.start`) of a batched loop's
    ``seed_losses``: ``n_seeds`` lists of one number per epoch trained."""

    def check(values: dict[str, Any], epoch: int) -> str | None:
        losses = values.get("seed_losses")
        if (
            not isinstance(losses, list)
            or len(losses) != n_seeds
            or not all(isinstance(own, list) and len(own) == epoch for own in losses)
            or not all(isinstance(v, float) for own in losses for v in own)
        ):
            return f"snapshot seed_losses are not {n_seeds} lists of {epoch} numbers"
        return None

    return check


def end_seed_epoch(
    snapshots: Any,
    losses: list[list[float]],
    totals: Sequence[Any],
    count: int,
    bar: Any,
    epoch: int,
    epochs: int,
    **values: Any,
) -> None:
    """After epoch ``epoch`` (1-based) of ``epochs`` of a seed batch: each seed's mean loss (its
    :class:`~matchopt.models.LossTotal` over ``count``) appended to its list in ``losses``, the
    first seed's shown on ``bar``, and a snapshot when due
    (:meth:`~matchopt.checkpoints.LoopSnapshots.save`: the first seed's losses as ``losses``,
    every seed's as ``seed_losses``, then ``values``)."""
    for own, total in zip(losses, totals):
        own.append(total.value() / count)
    bar.set_postfix(loss=f"{losses[0][-1]:.4f}", refresh=False)
    snapshots.save(
        epoch,
        epochs,
        losses=list(losses[0]),
        seed_losses=[list(own) for own in losses],
        **values,
    )


def epoch_bar(name: str, start: int, epochs: int, n_seeds: int, progress: bool) -> tqdm:
    """The progress bar of a seed stack's epochs ``start``..``epochs`` (a resumed run starts
    past 0): ``<name> training``, with the number of seeds when more than one."""
    seeds = f" ({n_seeds} seeds)" if n_seeds > 1 else ""
    return tqdm(
        range(start, epochs),
        initial=start,
        total=epochs,
        desc=f"{name} training{seeds}",
        unit="epoch",
        disable=not progress,
        leave=False,
    )
