"""The per-epoch bookkeeping of a loop that trains seeds as one batch
(:meth:`~matchopt.methods.training.SeedBatchable._train`): its snapshots' checks, its losses and
its progress bar."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tqdm.auto import tqdm

from matchopt.checkpoints import LoopSnapshots, ValuesCheck
from matchopt.data import OfflineData
from matchopt.methods.engine import TrainingRun


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


def seed_loop(
    run: TrainingRun,
    data: OfflineData,
    name: str,
    n_seeds: int,
    epochs: int,
    progress: bool,
    check: ValuesCheck | None = None,
    **parts: Any,
) -> tuple[LoopSnapshots, list[list[float]], tqdm]:
    """The start of a seed batch's training loop of ``epochs`` epochs over ``parts``: its
    snapshots (:meth:`~matchopt.methods.engine.TrainingRun.snapshots`, checked by
    :func:`seed_losses_check` and ``check``, restored where a killed run left one), each seed's
    losses so far, and the progress bar of the epochs left (:func:`epoch_bar`, named ``name``).
    """
    snapshots = run.snapshots(data, **parts)
    losses: list[list[float]] = [[] for _ in range(n_seeds)]
    seeds_check = seed_losses_check(n_seeds)

    def full_check(values: dict[str, Any], epoch: int) -> str | None:
        return seeds_check(values, epoch) or (check(values, epoch) if check else None)

    start = snapshots.start(losses[0], epochs, full_check)
    losses = snapshots.saved.get("seed_losses", losses)  # a killed run: go on
    return snapshots, losses, epoch_bar(name, start, epochs, n_seeds, progress)
