"""Execution backends of the grid runner: a local process pool, or Ray (local or a cluster).

Both run the jobs of a grid (one cell, the cells that share a Gaussian ensemble, a seed batch:
each one :func:`~matchopt.bench.cells.execute_job`) and hand every outcome to the driver's
``collect`` callback as soon as its cell ends. On Ray a job's cells run as one generator task,
so that a cluster keeps their shared ensemble on one node; the task streams each cell's outcome
back when the cell ends. Scheduling is the engine's job, not ours.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from matchopt.bench.cells import (
    CellOutcome,
    Job,
    execute_job,
    execute_part,
    init_pool_worker,
    init_worker,
    release_ensemble,
)
from matchopt.bench.status import RunningCells, run_with_status
from matchopt.checkpoints import save_on_interrupt
from matchopt.errors import MatchoptError

Collect = Callable[[CellOutcome], None]


def run_local(
    jobs: list[Job],
    data_dir: str | None,
    workers: int,
    threads: int,
    collect: Collect,
    out: str | None = None,
    progress: bool = False,
) -> None:
    """Run jobs on ``workers`` processes (``workers == 1``: in this process, in order);
    ``out``: the results folder (training snapshots of resumable methods go under it);
    ``progress``: with one worker, each cell shows its method's progress bars; with several,
    each running cell's latest bar is one line under the grid's (:mod:`matchopt.bench.status`:
    workers send their bars to the driver, which draws them).

    Every cell's outcome reaches ``collect`` as soon as the cell ends, also inside a job of
    several cells: the pool runs a job's cells one after another, each as its own task (the
    shared ensemble waits on disk in between). Interrupted, the pool's workers are stopped at
    once: their cells keep their training snapshots and continue on the next run.
    """
    if workers == 1:
        init_worker(threads)
        with save_on_interrupt():  # Ctrl-C in training: a snapshot first, so the cell resumes
            for job in jobs:
                for outcome in execute_job(job, data_dir, threads, out, progress):
                    collect(outcome)
        return
    _PoolRun(data_dir, workers, threads, collect, out, progress).run(jobs)


class _PoolRun:
    """The jobs of one :func:`run_local` call on a pool of ``workers`` processes."""

    def __init__(
        self,
        data_dir: str | None,
        workers: int,
        threads: int,
        collect: Collect,
        out: str | None,
        progress: bool,
    ):
        self.data_dir, self.threads, self.collect, self.out = data_dir, threads, collect, out
        # spawn, not fork: forking a process that runs torch's thread pools can deadlock.
        context = multiprocessing.get_context("spawn")
        # A plain queue, handed to the workers as they start (no manager process that could
        # outlive a killed driver).
        self.status = context.Queue() if progress else None
        self.pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=init_pool_worker,
            initargs=(threads, os.getpid(), self.status),
        )
        self.pending: dict[Future, tuple[Job, Job, list[CellOutcome]]] = {}
        self.running = RunningCells(workers, disable=not progress)

    def run(self, jobs: list[Job]) -> None:
        try:
            for job in jobs:
                self.submit(job, [])
            while self.pending:
                timeout = 0.5 if self.status else None
                done, _ = wait(self.pending, timeout=timeout, return_when=FIRST_COMPLETED)
                if self.status is not None:
                    self.running.drain(self.status)
                for future in done:
                    self.take(future)
        except BaseException:
            # shutdown() alone cancels only cells no worker has taken yet: the running ones
            # (and those already handed to a worker) would go on after the driver stopped.
            for process in list((getattr(self.pool, "_processes", None) or {}).values()):
                process.terminate()
            self.pool.shutdown(wait=False, cancel_futures=True)
            raise
        finally:
            self.running.close()
            if self.status is not None:
                self.status.cancel_join_thread()  # lines left in the pipe are not worth a wait
                self.status.close()
        self.pool.shutdown()

    def submit(self, job: Job, outcomes: list[CellOutcome]) -> None:
        """Queue the job's next part (:meth:`Job.parts`: a seed batch whole, other jobs cell by
        cell); a pool that broke meanwhile fails the job's other cells."""
        part = next(p for p in job.parts() if p.cells[0] == job.cells[len(outcomes)])
        task = (execute_part, part, self.data_dir, self.threads, self.out)
        try:
            if self.status is not None:
                first = part.cells[0]
                seeds = ",".join(str(c.seed) for c in part.cells)
                name = (
                    f"{first.task}/{first.method}/seeds {seeds}" if part.seed_batch else first.name
                )
                future = self.pool.submit(run_with_status, name, *task)
            else:
                future = self.pool.submit(*task)
        except BrokenProcessPool as exc:
            for rest in job.cells[len(outcomes) :]:
                self.collect(CellOutcome(rest, error=f"worker process died: {exc}"))
            return
        self.pending[future] = (job, part, outcomes)

    def take(self, future: Future) -> None:
        """Collect a finished part's outcomes, then queue the job's next part (or release its
        shared ensemble once every cell is done)."""
        job, part, outcomes = self.pending.pop(future)
        try:
            arrived = future.result()
        except BrokenProcessPool as exc:
            # A worker died (killed, out of memory): its cells are recorded as failed and will
            # be retried by the next run.
            arrived = [CellOutcome(c, error=f"worker process died: {exc}") for c in part.cells]
        for outcome in arrived:
            outcomes.append(outcome)
            self.collect(outcome)
        if len(outcomes) < len(job.cells):
            self.submit(job, outcomes)
        else:
            release_ensemble(job, outcomes)


def run_ray(
    jobs: list[Job],
    data_dir: str | None,
    workers: int,
    threads: int,
    address: str | None,
    collect: Collect,
    out: str | None = None,
) -> None:
    """Run jobs as Ray tasks of ``threads`` CPUs each, on a local instance or a cluster.

    A local instance gets ``workers * threads`` CPUs, so at most ``workers`` cells run at once;
    on a cluster (``address``) Ray places the tasks on the cluster's CPUs. A job's task is a
    Ray generator: each cell's outcome reaches ``collect`` when the cell ends, also inside a job
    of several cells.
    """
    try:
        import ray
    except ImportError:
        raise MatchoptError("the ray backend needs Ray: pip install 'matchopt[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        _start_ray(ray, address, workers * threads)
    try:
        remote_job = ray.remote(num_cpus=threads, max_retries=0)(_ray_job)
        # A local instance shares this machine's disk: a cell's snapshot stays until the driver
        # wrote its record. A cluster's workers remove theirs (the driver cannot reach them).
        keep = started_here and not address
        # One entry per running job: its stream of outcomes, the job, and how many came back.
        pending = [[remote_job.remote(job, data_dir, threads, out, keep), job, 0] for job in jobs]
        try:
            while pending:
                _take_ray_outcome(ray, pending, collect)
        except BaseException:
            for stream, _, _ in pending:
                ray.cancel(stream, force=True)
            raise
    finally:
        if started_here:
            ray.shutdown()


def _start_ray(ray: Any, address: str | None, cpus: int) -> None:
    """Connect to the Ray cluster at ``address``, or start a local instance of ``cpus`` CPUs.

    Raises:
        MatchoptError: neither could be done, in one line.
    """
    try:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, TimeoutError, ValueError, RuntimeError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MatchoptError(f"could not start or reach {where}: {first}") from None


def _take_ray_outcome(ray: Any, pending: list[list[Any]], collect: Collect) -> None:
    """Wait for the next outcome of any ``pending`` job's stream and collect it; a stream that
    ended (or failed) leaves ``pending``, its cells without an outcome failed."""
    ready, _ = ray.wait([entry[0] for entry in pending], num_returns=1)
    entry = next(entry for entry in pending if entry[0] is ready[0])
    stream, job, received = entry
    try:
        outcome = ray.get(next(stream))
    except StopIteration:  # the job's task is over
        outcome = None
    except ray.exceptions.RayError as exc:  # it failed, or its worker died
        outcome = f"ray task failed: {exc}"
    if isinstance(outcome, CellOutcome):
        collect(outcome)
        entry[2] += 1
        return
    pending.remove(entry)
    error = outcome or "ray task ended before its cell"
    for cell in job.cells[received:]:
        collect(CellOutcome(cell, error=error))


def _ray_job(
    job: Job,
    data_dir: str | None,
    threads: int,
    out: str | None = None,
    keep_snapshot: bool = False,
) -> Iterator[CellOutcome]:
    """A job's cells in order, each outcome handed back as soon as its cell ends; a finished
    cell's snapshot stays for the driver (``keep_snapshot``) or is removed here."""
    init_worker(threads)
    # On a cluster the snapshots (and a job's shared ensemble) are on the worker's disk: a
    # retried job resumes only there.
    yield from execute_job(job, data_dir, threads, out, keep_snapshot=keep_snapshot)
