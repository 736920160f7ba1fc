"""One grid cell: what it is, and how a worker runs it (in any process, local or Ray).

A cell runs :func:`matchopt.runner.run` and returns its outcome to the driver; only the driver
writes files (:mod:`matchopt.bench.grid`). A resumable method's training snapshot stays until
the cell's record is written (:func:`save_record`): a record that cannot be written (a full
disk) leaves it, and the rerun takes the trained model from there.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from matchopt.checkpoints import SNAPSHOT_FOLDER, remove_snapshot, snapshot_files
from matchopt.errors import MatchoptError
from matchopt.models.ensemble_cache import remove_cache_folder
from matchopt.records import RunRecord, error_path, record_path, write_record
from matchopt.tasks import Task, load_task


@dataclass(frozen=True)
class Cell:
    """One (task, method, seed) job of a grid, with the method's preset and overrides."""

    task: str
    method: str
    seed: int
    preset: str = "paper"
    overrides: tuple[tuple[str, str], ...] = ()
    #: Torch device of the run (None: ``$MATCHOPT_DEVICE`` or the CPU); not part of its name:
    #: a record made on one device stands for the cell on any.
    device: str | None = None

    @property
    def name(self) -> str:
        return f"{self.task}/{self.method}/seed{self.seed}"

    def record_path(self, out: Path) -> Path:
        return record_path(out, self.task, self.method, self.seed)

    def error_path(self, out: Path) -> Path:
        return error_path(out, self.task, self.method, self.seed)

    def snapshot_path(self, out: Path) -> Path:
        """Training snapshot of a resumable method while the cell runs
        (:mod:`matchopt.checkpoints`)."""
        return Path(out) / SNAPSHOT_FOLDER / self.task / self.method / f"seed{self.seed}.pt"


@dataclass(frozen=True)
class Job:
    """Cells one worker runs in order. Cells that fit the same Gaussian ensemble (GA, Ens-Mean
    and Ens-Min of one task and seed) form one job, largest ensemble first, sharing it through
    ``ensemble_folder`` (:mod:`matchopt.models.ensemble_cache`); other jobs hold one cell."""

    cells: tuple[Cell, ...]
    ensemble_folder: str | None = None
    #: The cells are seeds of one method, task, preset and overrides, trained as one batch
    #: (:func:`~matchopt.runner.run_seeds`; ``matchopt bench --batch-seeds``); with an
    #: ``ensemble_folder``, the cells of several methods and seeds that fit the same Gaussian
    #: ensembles, trained as one batch of the seeds (:func:`execute_ensemble_seed_batch`).
    seed_batch: bool = False

    @property
    def seeds(self) -> list[int]:
        """The job's seeds, each once, in the order of its cells."""
        return list(dict.fromkeys(cell.seed for cell in self.cells))

    def batch_snapshot_path(self, out: Path) -> Path:
        """The one training snapshot of a seed batch (:meth:`Cell.snapshot_path`'s folder)."""
        first = self.cells[0]
        seeds = "-".join(str(seed) for seed in self.seeds)
        return Path(out) / SNAPSHOT_FOLDER / first.task / first.method / f"seeds{seeds}.pt"


@dataclass
class CellOutcome:
    """What a worker sends back: a record and designs, or an error and its traceback."""

    cell: Cell
    record: RunRecord | None = None
    designs: np.ndarray | None = None
    error: str | None = None
    traceback: str | None = None
    seconds: float = 0.0
    #: Wall-clock time (``time.time()``) at which the worker finished the cell.
    ended: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.record is not None


def run_cell(
    cell: Cell,
    task: Task | None = None,
    data_dir: str | None = None,
    progress: bool = False,
    threads: int | None = None,
    snapshot: Path | None = None,
    ensemble_folder: str | None = None,
    seed_batch: list[int] | None = None,
) -> tuple[RunRecord, np.ndarray]:
    """Run one cell (``matchopt run`` runs each seed as one): its record and designs.

    ``extra["cell_seconds"]`` of the record is the whole run: fit, search and scoring (with
    the training of earlier sittings, ``extra["resumed"]``, when it continued a killed run).
    The ``snapshot`` file (:mod:`matchopt.checkpoints`) stays: the caller removes it once the
    record is written (:func:`save_record`), so that a record that cannot be written leaves the
    trained model for the rerun.
    """
    from matchopt.methods import RunContext
    from matchopt.runner import run

    start = time.perf_counter()
    record, designs = run(
        task if task is not None else _cached_task(cell.task, data_dir),
        cell.method,
        cell.seed,
        cell.preset,
        dict(cell.overrides),
        progress=progress,
        threads=threads,
        device=cell.device,
        context=RunContext.of(snapshot, ensemble_folder, seed_batch),
    )
    earlier = record.extra.get("resumed", {}).get("earlier_seconds", 0.0)
    record.extra["cell_seconds"] = time.perf_counter() - start + earlier
    return record, designs


def save_record(cell: Cell, out: Path, record: RunRecord, designs: np.ndarray | None) -> Path:
    """Write a finished cell's record and designs under ``out``, then remove its training
    snapshot (:meth:`Cell.snapshot_path`); returns the record's path.

    Raises:
        MatchoptError: the record could not be written (a full disk): the message says so in
            one line, and that the snapshot is kept for the rerun (when there is one).
    """
    try:
        path = write_record(out, record, designs)
    except OSError as err:
        snapshot = cell.snapshot_path(out)
        if snapshot_files(snapshot, root=out):
            kept = (
                f"its training snapshot {snapshot} is kept: rerun the same command to resume "
                "from it"
            )
        else:
            kept = "rerun the same command to run it again"
        raise MatchoptError(
            f"could not save the record of {cell.name} to {cell.record_path(out)}: "
            f"{err.strerror or err}; {kept}"
        ) from None
    remove_snapshot(cell.snapshot_path(out), root=out)
    return path


def execute_job(
    job: Job,
    data_dir: str | None,
    threads: int,
    out: str | None = None,
    progress: bool = False,
    keep_snapshot: bool = True,
) -> Iterator[CellOutcome]:
    """Run a job's cells in order (:func:`execute_cell`), yielding each outcome when its cell
    ends.

    The shared ensemble stays in ``job.ensemble_folder`` until every cell of the job finished,
    so a rerun after a kill takes it from there instead of training it again.
    """
    if job.seed_batch:
        outcomes = execute_seed_batch(job, data_dir, threads, out, progress)
        yield from outcomes
        release_ensemble(job, outcomes)
        return
    outcomes = []
    for cell in job.cells:
        outcomes.append(
            execute_cell(cell, data_dir, threads, out, job.ensemble_folder, progress, keep_snapshot)
        )
        yield outcomes[-1]
    release_ensemble(job, outcomes)


def execute_seed_batch(
    job: Job,
    data_dir: str | None,
    threads: int,
    out: str | None = None,
    progress: bool = False,
) -> list[CellOutcome]:
    """Run a seed batch (:attr:`Job.seed_batch`): one batched training, then each seed's
    search and scoring; one outcome per cell. A failure of the training fails every cell; the
    batch's snapshot (:meth:`Job.batch_snapshot_path`) stays for a rerun until every cell
    succeeded."""
    import torch

    from matchopt.methods import RunContext
    from matchopt.runner import run_seeds

    if job.ensemble_folder is not None:
        return execute_ensemble_seed_batch(job, data_dir, threads, out, progress)
    torch.set_num_threads(max(1, threads))
    first = job.cells[0]
    start = time.perf_counter()
    snapshot = job.batch_snapshot_path(Path(out)) if out is not None else None
    try:
        results = run_seeds(
            _cached_task(first.task, data_dir),
            first.method,
            [cell.seed for cell in job.cells],
            first.preset,
            dict(first.overrides),
            n_designs=128,
            progress=progress,
            threads=max(1, threads),
            device=first.device,
            context=RunContext.of(snapshot),
        )
    except Exception as exc:  # the grid records the failure of every seed and goes on
        return _batch_failed(job, exc, time.perf_counter() - start)
    seconds = (time.perf_counter() - start) / len(job.cells)
    outcomes = []
    for cell, (record, designs) in zip(job.cells, results):
        record.extra["cell_seconds"] = record.fit_seconds + record.search_seconds
        outcomes.append(CellOutcome(cell, record, designs, seconds=seconds))
    if snapshot is not None:
        remove_snapshot(snapshot)
    return outcomes


def _batch_failed(job: Job, exc: Exception, seconds: float) -> list[CellOutcome]:
    """Every cell of a seed batch whose training raised ``exc`` (called in its handler)."""
    error, trace = f"{type(exc).__name__}: {exc}", traceback.format_exc()
    return [CellOutcome(cell, error=error, traceback=trace, seconds=seconds) for cell in job.cells]


def execute_ensemble_seed_batch(
    job: Job,
    data_dir: str | None,
    threads: int,
    out: str | None = None,
    progress: bool = False,
) -> list[CellOutcome]:
    """Run a seed batch of cells that fit the same Gaussian ensembles (GA, Ens-Mean and Ens-Min
    of several seeds): the first cell's method trains every seed's ensemble in one batch
    (:func:`~matchopt.methods.training.fit_seeds`) into ``job.ensemble_folder``, then every cell
    runs, reading its seed's ensemble from there. One outcome per cell, in the job's order; a
    failure of the batch's training fails every cell.

    Each record's ``extra.seed_batch`` holds the seeds and the batch's training seconds; the
    first method's records count a seed's share of them in ``fit_seconds`` (the others read
    the trained ensembles, as cells sharing an ensemble do).
    """
    import torch

    from matchopt.methods import RunContext, make_method
    from matchopt.methods.training import fit_seeds
    from matchopt.runtime import limit_threads

    torch.set_num_threads(max(1, threads))
    first, seeds = job.cells[0], job.seeds
    snapshot = job.batch_snapshot_path(Path(out)) if out is not None else None
    start = time.perf_counter()
    try:
        task = _cached_task(first.task, data_dir)
        # The batch's one snapshot file is the first method's (fit_seeds).
        options = {"progress": progress, "device": first.device}
        methods = [
            make_method(first.method, first.preset, dict(first.overrides), seed=s, **options)
            for s in seeds
        ]
        for k, method in enumerate(methods):
            method.run = RunContext.of(snapshot if k == 0 else None, job.ensemble_folder, seeds)
        with limit_threads(max(1, threads)):
            fit_seeds(methods, task.offline)
    except Exception as exc:  # the grid records the failure of every cell and goes on
        return _batch_failed(job, exc, time.perf_counter() - start)
    batch_seconds = time.perf_counter() - start
    outcomes = []
    for cell in job.cells:
        outcome = execute_cell(
            cell, data_dir, threads, out, job.ensemble_folder, progress, seed_batch=seeds
        )
        if outcome.record is not None:
            outcome.record.extra["seed_batch"] = {"seeds": seeds, "fit_seconds": batch_seconds}
            if cell.method == first.method:  # its batch trained the ensembles: not read
                share = batch_seconds / len(seeds)
                outcome.record.fit_seconds += share
                outcome.record.extra["cell_seconds"] += share
                shared = outcome.record.extra.get("fit", {}).get("shared_ensemble") or {}
                shared.update(from_cache=False, train_seconds=share)
        outcomes.append(outcome)
    if snapshot is not None:
        remove_snapshot(snapshot)
    return outcomes


def release_ensemble(job: Job, outcomes: list[CellOutcome]) -> None:
    """Delete the job's shared ensemble once every one of its cells succeeded (a failed cell's
    rerun takes it from there)."""
    if job.ensemble_folder is not None and all(o.ok for o in outcomes):
        remove_cache_folder(job.ensemble_folder)


def execute_cell(
    cell: Cell,
    data_dir: str | None,
    threads: int,
    out: str | None = None,
    ensemble_folder: str | None = None,
    progress: bool = False,
    keep_snapshot: bool = True,
    seed_batch: list[int] | None = None,
) -> CellOutcome:
    """Run one cell in a grid worker and return its outcome; never raises for a failure of the
    method (the grid records it and goes on). With ``out``, resumable methods keep training
    snapshots under it (:meth:`Cell.snapshot_path`) and continue from them; the snapshot of a
    finished cell stays for the driver to remove once it wrote the record (:func:`save_record`),
    unless not ``keep_snapshot`` (a worker on another machine's disk, which the driver cannot
    reach: removed here). With ``ensemble_folder``, Gaussian-ensemble methods share their
    ensemble through it; with ``progress``, the method shows its own progress bars (training
    epochs, search steps)."""
    import torch

    torch.set_num_threads(max(1, threads))
    start = time.perf_counter()
    try:
        snapshot = cell.snapshot_path(Path(out)) if out is not None else None
        record, designs = run_cell(
            cell,
            data_dir=data_dir,
            threads=max(1, threads),
            snapshot=snapshot,
            ensemble_folder=ensemble_folder,
            progress=progress,
            seed_batch=seed_batch,
        )
    except Exception as exc:  # a failing cell is recorded and the grid goes on
        return CellOutcome(
            cell,
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
            seconds=time.perf_counter() - start,
        )
    if snapshot is not None and not keep_snapshot:
        remove_snapshot(snapshot)
    return CellOutcome(cell, record, designs, seconds=time.perf_counter() - start)


@lru_cache(maxsize=4)
def _cached_task(name: str, data_dir: str | None):
    # Loading TF-Bind-10 takes seconds; a worker reuses the task for all its cells.
    return load_task(name, data_dir)


def exit_with_parent(parent_pid: int, interval: float = 1.0) -> None:
    """End this worker process soon after its driver is gone.

    A driver killed by SIGKILL cannot shut its pool down; without this its workers would go on
    computing (and holding memory) for minutes. A daemon thread checks the parent's pid.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="matchopt-exit-with-parent").start()


def init_pool_worker(threads: int, parent_pid: int, status: Any = None) -> None:
    """Initializer of a grid's pool workers: :func:`init_worker` and :func:`exit_with_parent`;
    ``status``: the queue the worker's cells send their progress to
    (:func:`~matchopt.bench.status.run_with_status`)."""
    exit_with_parent(parent_pid)
    init_worker(threads)
    if status is not None:
        from matchopt.bench.status import use_status_queue

        use_status_queue(status)


def init_worker(threads: int) -> None:
    """Process-pool initializer: limit BLAS/OpenMP threads so workers do not oversubscribe."""
    import torch

    from matchopt.runtime import keep_freed_memory

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    torch.set_num_threads(threads)
    keep_freed_memory()
