"""The grid runner: expand tasks x methods x seeds into cells, skip finished ones, run the rest.

A job (one cell, or the cells that share their training: :func:`plan_jobs`) runs in a worker
(:func:`~matchopt.bench.cells.execute_job`) that returns each cell's outcome to the driver; only
the driver writes files, atomically (temporary file + rename), so a killed run loses no finished
cell and leaves no partial record, and a Ray cluster needs no shared filesystem for results.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from matchopt._version import __version__
from matchopt.bench.backends import run_local, run_ray
from matchopt.bench.cells import Cell, CellOutcome, Job, save_record
from matchopt.bench.status import time_left
from matchopt.checkpoints import SNAPSHOT_FOLDER, remove_snapshot_temporaries
from matchopt.errors import ConfigError, MatchoptError
from matchopt.io import FileLocked, check_output_folder, file_lock
from matchopt.methods import get_method_entry
from matchopt.methods.base import build_config
from matchopt.methods.surrogate import EnsembleSurrogateMethod
from matchopt.methods.training import SeedBatchable
from matchopt.models.ensemble_cache import remove_cache_temporaries, training_fields
from matchopt.models.gaussian import trains_grouped
from matchopt.names import BACKENDS
from matchopt.records import (
    RunRecord,
    designs_path,
    read_record,
    same_config,
    summary_table,
)
from matchopt.runtime import MAX_SEED, check_threads, default_threads, resolve_device
from matchopt.safe_paths import (
    check_no_links,
    open_folder,
    parts_below,
    remove_below,
    temporary_name,
    write_below,
)
from matchopt.tasks import TASKS, resolve_data_dir

#: Held by a running bench in its results folder: a second bench on the folder stops at once.
LOCK_FILE = ".matchopt-bench.lock"
#: Folder (under the snapshots) of the Gaussian ensembles shared by the cells of one job.
ENSEMBLE_DIR = "ensembles"


@dataclass
class Grid:
    """Tasks x methods x seeds under one preset.

    ``overrides`` maps a config key to a value for every method of the grid (each must have that
    field), ``"method.key"`` to a value for one method, and either behind ``"task:"`` to a value
    on one task only (the CLI's ``--set``; :meth:`method_overrides`).
    """

    tasks: Sequence[str]
    methods: Sequence[str]
    seeds: Sequence[int]
    preset: str = "paper"
    overrides: dict[str, str] = field(default_factory=dict)
    #: Torch device of every cell (None: ``$MATCHOPT_DEVICE`` or the CPU).
    device: str | None = None

    def method_overrides(self, task: str) -> dict[str, dict[str, str]]:
        """Per-method overrides on ``task``.

        Keys: ``key`` (every method of the grid, each must have the field), ``method.key`` (one
        method), and either one behind ``task:`` (that task only: e.g. the paper's 50 epochs on
        superconductor, ``superconductor:ga.epochs=50``); a task-scoped value wins over an
        unscoped one. Raises for a scope or key the grid lacks.
        """
        per_method: dict[str, dict[str, str]] = {m: {} for m in self.methods}
        scoped = []
        for key, value in self.overrides.items():
            scope, colon, rest = key.partition(":")
            if not colon:
                self._apply(per_method, key, value)
                continue
            if scope not in self.tasks:
                raise ConfigError(key, value, f"task {scope!r} is not in the grid")
            scoped.append((scope, rest, value))
        for scope, key, value in scoped:
            if scope == task:
                self._apply(per_method, key, value, replace=True)
        return per_method

    def _apply(
        self, per_method: dict[str, dict[str, str]], key: str, value: str, replace: bool = False
    ) -> None:
        scope, dot, name = key.rpartition(".")
        if dot:
            if scope not in per_method:
                raise ConfigError(key, value, f"method {scope!r} is not in the grid")
            per_method[scope][name] = value
            return
        owners = [m for m in self.methods if _has_field(m, key)]
        if not owners:
            raise ConfigError(key, value, "no method of the grid has this config field")
        others = [m for m in self.methods if m not in owners]
        if others:
            # Applying it to some methods only would leave the others at their preset
            # budget without a word: the grid would compare unlike things.
            raise ConfigError(
                key,
                value,
                f"{', '.join(others)} have no config field {key!r}; scope it to the methods "
                f"that have it, e.g. {owners[0]}.{key}={value}",
            )
        for m in owners:
            if replace:
                per_method[m][key] = value
            else:
                per_method[m].setdefault(key, value)

    def cells(self) -> list[Cell]:
        cells = []
        for t in self.tasks:
            per_method = self.method_overrides(t)
            cells += [
                Cell(t, m, int(s), self.preset, tuple(sorted(per_method[m].items())), self.device)
                for m in self.methods
                for s in self.seeds
            ]
        return cells

    def validate(self, data_dir: str | os.PathLike | None) -> None:
        """Fail before any work: unknown names, bad overrides, missing task data."""
        if not self.tasks or not self.methods or not len(self.seeds):
            raise MatchoptError("a grid needs at least one task, one method and one seed")
        for what, names in (("task", self.tasks), ("method", self.methods), ("seed", self.seeds)):
            repeated = first_repeated([int(n) for n in names] if what == "seed" else names)
            if repeated is not None:  # the same cells would run twice over
                raise MatchoptError(f"the grid lists {what} {repeated!r} twice")
        for seed in self.seeds:  # before any cell fails on it
            if not 0 <= int(seed) <= MAX_SEED:
                raise MatchoptError(
                    f"the grid's seed {seed}: seeds are integers from 0 to {MAX_SEED}"
                )
        for name in self.tasks:
            if name not in TASKS:
                raise MatchoptError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")
        for task in self.tasks:
            for method, overrides in self.method_overrides(task).items():
                build_config(get_method_entry(method), self.preset, overrides)
        resolve_device(self.device)
        folder = resolve_data_dir(data_dir)
        for name in self.tasks:
            task_cls = TASKS[name]
            if task_cls.data_status(folder) == "missing":
                raise MatchoptError(task_cls.missing_message(folder))


def first_repeated(items: Sequence[Any]) -> Any:
    """The first item that appears earlier in ``items`` too, or None."""
    seen: set = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None


def _has_field(method: str, key: str) -> bool:
    entry = get_method_entry(method)
    names = {f.name for f in dataclasses.fields(entry.cls.config_class)}
    return key in names and key not in entry.fixed


def expected_config(cell: Cell) -> dict[str, Any]:
    """The config a record of this cell must carry (as stored in JSON)."""
    config = build_config(get_method_entry(cell.method), cell.preset, dict(cell.overrides))
    return json.loads(json.dumps(dataclasses.asdict(config)))


def plan_jobs(cells: list[Cell], out: Path, batch_seeds: bool = False) -> list[Job]:
    """Group the cells that fit the same Gaussian ensemble (same task, seed and training fields,
    e.g. GA, Ens-Mean and Ens-Min) into one job, largest ensemble first; with ``batch_seeds``,
    the seeds of one task, method, preset and overrides whose method trains seeds as a batch
    (``SeedBatchable``) into one seed batch, and the cells of every seed that fit the same
    Gaussian ensemble into one seed batch sharing the ensembles it trains; every other cell is a
    job of its own. Order otherwise follows ``cells``."""
    groups: dict[str, list[tuple[int, Cell]]] = {}
    order: list[str] = []
    batched: set[str] = set()
    sharing: set[str] = set()  # groups of cells that fit the same Gaussian ensembles
    for cell in cells:
        entry = get_method_entry(cell.method)
        name = cell.name
        size = 0
        if issubclass(entry.cls, EnsembleSurrogateMethod):
            config = build_config(entry, cell.preset, dict(cell.overrides))
            size = config.n_models
            if batch_seeds:  # one ensemble per seed, all seeds trained in one batch
                fields = [cell.task, "seeds", training_fields(config, False)]
            else:
                grouped = trains_grouped(config.hidden)
                fields = [cell.task, cell.seed, training_fields(config, grouped)]
            name = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
            sharing.add(name)
            if batch_seeds:
                batched.add(name)
        elif batch_seeds and issubclass(entry.cls, SeedBatchable):
            name = json.dumps(["seeds", cell.task, cell.method, cell.preset, cell.overrides])
            batched.add(name)
        if name not in groups:
            groups[name] = []
            order.append(name)
        groups[name].append((size, cell))
    jobs = []
    for name in order:
        members = sorted(groups[name], key=lambda item: -item[0])  # stable: grid order on ties
        job_cells = tuple(cell for _, cell in members)
        first = job_cells[0]
        seeds = {cell.seed for cell in job_cells}
        folder = None
        if name in sharing and len(job_cells) > 1:
            where = "seeds" if len(seeds) > 1 else f"seed{first.seed}"
            folder = str(out / SNAPSHOT_FOLDER / ENSEMBLE_DIR / f"{first.task}-{where}-{name}")
        jobs.append(Job(job_cells, folder, seed_batch=name in batched and len(seeds) > 1))
    return jobs


def finished_record(cell: Cell, out: Path) -> RunRecord | None:
    """The cell's record if it is already in ``out``; an error if it was made differently, or
    if a folder on the way to it (or to the cell's snapshot) is a link
    (:func:`check_cell_paths`)."""
    check_cell_paths(cell, out)
    path = cell.record_path(out)
    if not os.path.lexists(path):
        return None
    try:
        record = read_record(path, root=out)
    except MatchoptError as exc:
        raise MatchoptError(f"{exc}; delete it to rerun") from None
    if record.preset != cell.preset or not same_config(record.config, expected_config(cell)):
        raise MatchoptError(
            f"{path} was made with another preset or config (preset {record.preset!r}); "
            "use another --out folder or delete the record"
        )
    return record


def check_cell_paths(cell: Cell, out: Path) -> None:
    """Refuse, before the cell runs, a link (or a file) where a folder of ``out`` on the way
    to the cell's record or snapshot is: matchopt follows no link below a results folder
    (:mod:`matchopt.safe_paths`)."""
    for path in (cell.record_path(out), cell.snapshot_path(out)):
        check_no_links(out, path)


# ---------------------------------------------------------------------------------------------
# Driver side


@dataclass
class GridSummary:
    """Counts and outcomes of one ``run_grid`` call."""

    out: Path
    total: int
    skipped: list[Cell] = field(default_factory=list)
    finished: list[CellOutcome] = field(default_factory=list)
    failed: list[CellOutcome] = field(default_factory=list)
    interrupted: bool = False
    records: list[RunRecord] = field(default_factory=list)
    """Records of the grid's finished cells, from this run and earlier ones."""

    def table(self) -> str:
        """Mean +- std (population) of p100 and p50 over the seeds done, per task and method."""
        return summary_table(self.records)

    def text(self) -> str:
        lines = [self.table(), ""] if self.records else []
        lines += [
            f"grid: {self.total} cells  finished {len(self.finished)}  "
            f"skipped (already done) {len(self.skipped)}  failed {len(self.failed)}"
            + ("  INTERRUPTED" if self.interrupted else "")
        ]
        for outcome in self.failed:
            lines.append(
                f"  FAILED {outcome.cell.name}: {outcome.error}  "
                f"(traceback: {outcome.cell.error_path(self.out)})"
            )
        pending = self.total - len(self.skipped) - len(self.finished) - len(self.failed)
        if self.failed or pending:
            lines.append("rerun the same command to retry failed and unfinished cells")
        lines.append(f"records in {self.out}; tables: matchopt report {self.out}")
        return "\n".join(lines)


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def check_results_folder(out: str | os.PathLike) -> Path:
    """:func:`~matchopt.io.check_output_folder`, and its snapshot folder, where present, is a
    folder and not a link (matchopt follows no link into a place it did not create)."""
    out = check_output_folder(out, "results folder")
    snapshots = out / SNAPSHOT_FOLDER
    if snapshots.is_symlink() or (os.path.lexists(snapshots) and not snapshots.is_dir()):
        kind = "a link" if snapshots.is_symlink() else "not a folder"
        raise MatchoptError(f"{snapshots} is {kind}; remove it (matchopt keeps snapshots there)")
    return out


def run_grid(
    grid: Grid,
    out: str | os.PathLike,
    backend: str = "local",
    workers: int | None = None,
    data_dir: str | os.PathLike | None = None,
    ray_address: str | None = None,
    progress: bool = True,
    threads: int | str | None = None,
    batch_seeds: bool = False,
) -> GridSummary:
    """Run every unfinished cell of ``grid`` and write its record (or error) under ``out``.

    Args:
        grid: the cells to run.
        out: results folder (``<out>/<task>/<method>/seed<k>.json``).
        backend: ``"local"`` (process pool; ``workers=1`` runs in this process) or ``"ray"``.
        workers: concurrent cells (default: one per core). Each gets cores // workers threads.
        data_dir: design-bench data folder (default ``$MATCHOPT_DATA_DIR``).
        ray_address: Ray cluster address; ``None`` starts a local Ray instance.
        progress: show a progress bar over cells (with ETA) on stderr; with one local worker,
            also the running cell's own bars (its training epochs).
        threads: compute threads of each cell; default :func:`~matchopt.runtime.default_threads`
            but at most cores // workers (so that cells never share a core).
        batch_seeds: train the unfinished seeds of a method that batches seeds (DDOM, COMs,
            MINs, BONET, the Gaussian ensembles) as one batch (:func:`plan_jobs`): on a GPU
            one step for all of them; each seed's record as its own run gives it, up to float
            round-off (bit for bit for MINs and BONET; tests/methods/test_seed_batches.py).
    """
    if backend not in BACKENDS:
        raise MatchoptError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise ConfigError("workers", workers, "needs at least 1")
    if threads is not None:
        threads = check_threads(threads)
    grid.validate(data_dir)
    out = check_results_folder(out)
    try:
        with file_lock(out / LOCK_FILE, wait=False):
            return _run_unlocked(
                grid, out, backend, workers, data_dir, ray_address, progress, threads, batch_seeds
            )
    except FileLocked as err:
        raise MatchoptError(
            f"another bench ({err.holder}) is running on {out}; wait for it to finish or use "
            "another results folder"
        ) from None


def _run_unlocked(
    grid: Grid,
    out: Path,
    backend: str,
    workers: int,
    data_dir: str | os.PathLike | None,
    ray_address: str | None,
    progress: bool,
    threads: int | None,
    batch_seeds: bool = False,
) -> GridSummary:
    folder = resolve_data_dir(data_dir)
    data_dir_text = str(folder) if folder is not None else None
    cells = grid.cells()
    summary = GridSummary(out=out, total=len(cells))
    jobs = _unfinished_jobs(cells, out, summary, batch_seeds)
    # Threads per cell follow the whole grid, not the cells left: thread count changes BLAS
    # summation order, so a resumed grid must give a cell the threads of an uninterrupted run.
    workers = min(workers, max(1, len(cells)))
    if threads is None:
        threads = max(1, min(default_threads(), (os.cpu_count() or 1) // workers))
    collect = _Collector(summary, out, workers, progress)
    try:
        if jobs and backend == "ray":
            run_ray(jobs, data_dir_text, workers, threads, ray_address, collect, str(out))
        elif jobs:
            run_local(jobs, data_dir_text, workers, threads, collect, str(out), progress)
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        collect.bar.close()
    return summary


def _unfinished_jobs(
    cells: list[Cell], out: Path, summary: GridSummary, batch_seeds: bool
) -> list[Job]:
    """The jobs of the cells that have no record in ``out`` yet (:func:`plan_jobs`); the
    others go to ``summary`` as skipped, with their records. The folders the jobs write to are
    checked (no link) and cleared of temporary files a killed run left."""
    todo = []
    for cell in cells:
        record = finished_record(cell, out)
        if record is not None:
            summary.skipped.append(cell)
            summary.records.append(record)
        else:
            todo.append(cell)
    jobs = plan_jobs(todo, out, batch_seeds)
    for job in jobs:  # the shared ensembles' folders too, before any cell runs
        if job.ensemble_folder is not None:
            check_no_links(out, Path(job.ensemble_folder) / "x")
    _remove_stale_temporaries(out, jobs)
    return jobs


class _Collector:
    """The driver's ``collect``: stores each outcome (:func:`store_outcome`), counts it in the
    summary and moves the grid's progress bar, whose time left comes from the measured times of
    the cells that finished in this run (the median, over the workers), not from tqdm's rate of
    cells, which swings with cell sizes."""

    def __init__(self, summary: GridSummary, out: Path, workers: int, progress: bool):
        self.summary, self.out, self.workers = summary, out, workers
        self.cell_seconds: list[float] = []
        self.bar = tqdm(
            total=summary.total,
            initial=len(summary.skipped),
            desc="grid",
            unit="cell",
            disable=not progress,
            dynamic_ncols=True,
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",
        )

    def __call__(self, outcome: CellOutcome) -> None:
        summary = self.summary
        store_outcome(outcome, self.out)
        (summary.finished if outcome.ok else summary.failed).append(outcome)
        if outcome.ok:
            summary.records.append(outcome.record)
            self.cell_seconds.append(outcome.seconds)
        self.bar.update(1)
        left = time_left(self.cell_seconds, self.bar.total - self.bar.n, self.workers)
        self.bar.set_postfix_str(f"failed {len(summary.failed)}, about {left} left", refresh=True)


def store_outcome(outcome: CellOutcome, out: Path) -> None:
    """Write a finished cell's record and designs, then remove its training snapshot
    (:func:`~matchopt.bench.cells.save_record`), or write a failed cell's error file.

    Raises:
        MatchoptError: a file could not be written (a full disk), in one line; a finished cell
            keeps its training snapshot, so that the rerun resumes from it.
    """
    cell = outcome.cell
    if outcome.ok:
        save_record(cell, out, outcome.record, outcome.designs)
        remove_below(out, cell.error_path(out))
        return
    payload = {
        "cell": dataclasses.asdict(cell),
        "error": outcome.error,
        "traceback": outcome.traceback,
        "seconds": outcome.seconds,
        "version": __version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    try:
        write_below(out, cell.error_path(out), json.dumps(payload, indent=1).encode())
    except OSError as err:
        raise MatchoptError(
            f"could not save the error file of {cell.name} to {cell.error_path(out)}: "
            f"{err.strerror or err}"
        ) from None


def _remove_stale_temporaries(out: Path, jobs: list[Job]) -> None:
    """Delete the temporary files a run killed during a write left for the jobs' files: each by
    its exact name (:func:`~matchopt.safe_paths.temporary_name` of a record, designs, error
    file, snapshot or shared ensemble), in folders reached without following a link. This bench
    holds the folder's lock, so no writer is running."""
    for job in jobs:
        for cell in job.cells:
            record = cell.record_path(out)
            names = [record.name, designs_path(record).name, cell.error_path(out).name]
            _remove_temporaries(out, record.parent, names)
            remove_snapshot_temporaries(cell.snapshot_path(out), out)
        if job.seed_batch or job.ensemble_folder is not None:
            remove_snapshot_temporaries(job.batch_snapshot_path(out), out)
        if job.ensemble_folder is not None:
            remove_cache_temporaries(job.ensemble_folder, out)


def _remove_temporaries(root: Path, folder: Path, names: list[str]) -> None:
    with open_folder(root, parts_below(root, folder)) as opened:
        for name in names if opened is not None else ():
            opened.remove(temporary_name(name))
