"""One grid cell and one job of cells: what they are, and how a worker runs them (in any
process, local or Ray).

A job (one cell, the cells that share a Gaussian ensemble, a batch of seeds) runs as one
:func:`matchopt.runner.run_batch`, which gives each cell's complete record when the cell ends
(:func:`execute_job`); the worker returns each outcome to the driver; only the driver writes
files (:mod:`matchopt.bench.grid`). A resumable method's training snapshot stays until
the cell's record is written (:func:`save_record`): a record that cannot be written (a full
disk) leaves it, and the rerun takes the trained model from there.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from matchopt.checkpoints import SNAPSHOT_FOLDER, remove_snapshot, snapshot_files
from matchopt.errors import MatchoptError
from matchopt.methods import RunContext
from matchopt.models.ensemble_cache import remove_cache_folder
from matchopt.records import RunRecord, error_path, record_path, write_record
from matchopt.runner import N_DESIGNS, RunSpec, SeedBatchPlan, run_batch
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

    def spec(self, context: RunContext | None = None) -> RunSpec:
        """The cell as a run of :func:`~matchopt.runner.run_batch`, in ``context``."""
        return RunSpec(self.method, self.seed, self.preset, dict(self.overrides), context)


@dataclass(frozen=True)
class Job:
    """Cells one worker runs in order, as one :func:`~matchopt.runner.run_batch`
    (:func:`execute_job`). Cells that fit the same Gaussian ensemble (GA, Ens-Mean and Ens-Min
    of one task and seed) form one job, largest ensemble first, sharing it through
    ``ensemble_folder`` (:mod:`matchopt.shared_ensembles`); other jobs hold one cell."""

    cells: tuple[Cell, ...]
    ensemble_folder: str | None = None
    #: The first cell's method trains every seed of the job as one batch
    #: (:class:`~matchopt.runner.SeedBatchPlan`; ``matchopt bench --batch-seeds``): the seeds
    #: of one method, task, preset and overrides, or with an ``ensemble_folder``, the cells of
    #: several methods and seeds that fit the same Gaussian ensembles, which the batch trains
    #: and leaves there for the other methods' cells.
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

    def context(self, cell: Cell, out: Path | None) -> RunContext:
        """The context ``cell`` runs (or, trained in the batch, searches) in: its snapshot file
        under ``out``, the job's ensemble folder, and in a seed batch that shares one, the
        batch's seeds (whose ensembles the cell reads)."""
        snapshot = cell.snapshot_path(out) if out is not None else None
        seeds = self.seeds if self.seed_batch and self.ensemble_folder is not None else None
        return RunContext.of(snapshot, self.ensemble_folder, seeds)

    def batch(self, out: Path | None) -> SeedBatchPlan | None:
        """The job's seed batch (None unless :attr:`seed_batch`): every seed, trained within
        the batch's snapshot file under ``out`` and the job's ensemble folder."""
        if not self.seed_batch:
            return None
        snapshot = self.batch_snapshot_path(out) if out is not None else None
        seeds = self.seeds if self.ensemble_folder is not None else None
        context = RunContext.of(snapshot, self.ensemble_folder, seeds)
        return SeedBatchPlan(tuple(self.seeds), context)

    def parts(self) -> list[Job]:
        """The pieces a process pool runs as one task each: a seed batch whole (its seeds train
        together), other jobs cell by cell (each outcome reaches the driver when its cell ends;
        the shared ensemble waits on disk in between)."""
        if self.seed_batch or len(self.cells) == 1:
            return [self]
        return [Job((cell,), self.ensemble_folder) for cell in self.cells]


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
    """Run one cell (``matchopt run`` runs each seed as one): its record and designs, from
    :func:`~matchopt.runner.run_batch` as every job's (:func:`execute_job`); raises its failure.

    ``extra["cell_seconds"]`` of the record is the whole run: fit, search and scoring (with
    the training of earlier sittings, ``extra["resumed"]``, when it continued a killed run).
    The ``snapshot`` file (:mod:`matchopt.checkpoints`) stays: the caller removes it once the
    record is written (:func:`save_record`), so that a record that cannot be written leaves the
    trained model for the rerun.
    """
    spec = cell.spec(RunContext.of(snapshot, ensemble_folder, seed_batch))
    (result,) = run_batch(
        task if task is not None else _cached_task(cell.task, data_dir),
        [spec],
        progress=progress,
        threads=threads,
        device=cell.device,
    )
    if isinstance(result, Exception):
        raise result
    return result


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
    release: bool = True,
) -> Iterator[CellOutcome]:
    """Run a job's cells in order, yielding each outcome when its cell ends: every job (one
    cell, cells sharing an ensemble, a seed batch) is one :func:`~matchopt.runner.run_batch`.
    Never raises for a failure of a method or its task (the grid records it and goes on): a
    failure of a seed batch's training fails every cell.

    With ``out``, resumable methods keep training snapshots under it (:meth:`Cell.snapshot_path`,
    :meth:`Job.batch_snapshot_path`) and continue from them; the snapshot of a finished cell
    stays for the driver to remove once it wrote the record (:func:`save_record`), unless not
    ``keep_snapshot`` (a worker on another machine's disk, which the driver cannot reach:
    removed here). A seed batch's snapshot goes once its cells ended, when every one succeeded
    or the batch's training succeeded and left its ensembles in the job's folder. With
    ``release``, the shared ensemble goes once every cell succeeded (:func:`release_ensemble`;
    a rerun after a kill or a failure takes it from there); a pool running a job in parts
    releases it itself. With ``progress``, the methods show their own progress bars (training
    epochs, search steps).
    """
    import torch

    torch.set_num_threads(max(1, threads))
    root = Path(out) if out is not None else None
    outcomes: list[CellOutcome] = []
    untrained: list[Exception] = []  # the failure of the batch's training, if it failed
    for outcome in _outcomes(job, data_dir, max(1, threads), root, progress, untrained):
        if outcome.ok and root is not None and not keep_snapshot:
            remove_snapshot(outcome.cell.snapshot_path(root))
        outcomes.append(outcome)
        yield outcome
    kept_elsewhere = job.ensemble_folder is not None and not untrained
    if job.seed_batch and root is not None and (all(o.ok for o in outcomes) or kept_elsewhere):
        remove_snapshot(job.batch_snapshot_path(root))
    if release:
        release_ensemble(job, outcomes)


def execute_part(
    job: Job, data_dir: str | None, threads: int, out: str | None = None, progress: bool = False
) -> list[CellOutcome]:
    """:func:`execute_job` of one of :meth:`Job.parts` in a pool worker: its outcomes, the
    shared ensemble left for the job's other parts (the driver releases it)."""
    return list(execute_job(job, data_dir, threads, out, progress, release=False))


def _outcomes(
    job: Job,
    data_dir: str | None,
    threads: int,
    out: Path | None,
    progress: bool,
    untrained: list[Exception],
) -> Iterator[CellOutcome]:
    """The outcome of each cell of ``job`` when it ends (module notes); a failure of loading
    the task or of the batch's training, which fails every cell left, goes to ``untrained``."""
    first = job.cells[0]

    def results() -> Iterator[tuple[RunRecord, np.ndarray] | Exception]:
        specs = [cell.spec(job.context(cell, out)) for cell in job.cells]
        task = _cached_task(first.task, data_dir)
        args = (progress, threads, first.device)
        yield from run_batch(task, specs, job.batch(out), None, N_DESIGNS, *args)

    stream, start = results(), time.perf_counter()
    for index, cell in enumerate(job.cells):
        try:
            result = next(stream)
        except Exception as exc:  # the task or the batch's training: every cell left fails
            untrained.append(exc)
            yield from _failed(job.cells[index:], exc, time.perf_counter() - start)
            return
        if isinstance(result, Exception):
            yield _failed([cell], result, time.perf_counter() - start)[0]
        else:
            record, designs = result
            yield CellOutcome(cell, record, designs, seconds=record.extra["cell_seconds"])
        start = time.perf_counter()


def _failed(cells: Sequence[Cell], exc: Exception, seconds: float) -> list[CellOutcome]:
    """The outcomes of ``cells`` that ``exc`` failed, with its traceback."""
    error = f"{type(exc).__name__}: {exc}"
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return [CellOutcome(cell, error=error, traceback=trace, seconds=seconds) for cell in cells]


def release_ensemble(job: Job, outcomes: list[CellOutcome]) -> None:
    """Delete the job's shared ensemble once every one of its cells succeeded (a failed cell's
    rerun takes it from there)."""
    if job.ensemble_folder is not None and all(o.ok for o in outcomes):
        remove_cache_folder(job.ensemble_folder)


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
