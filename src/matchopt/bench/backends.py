"""Execution backends of the grid runner: a local process pool, or Ray (local or a cluster).

Both run :func:`matchopt.bench.cells.execute_job` on each job (one cell, or the cells that share
a Gaussian ensemble) and hand every outcome to the driver's ``collect`` callback as soon as its
job ends; scheduling is the engine's job, not ours.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from matchopt.bench.cells import CellOutcome, Job, execute_job, init_pool_worker, init_worker
from matchopt.errors import MatchoptError

Collect = Callable[[CellOutcome], None]


def run_local(
    jobs: list[Job],
    data_dir: str | None,
    workers: int,
    threads: int,
    collect: Collect,
    out: str | None = None,
) -> None:
    """Run jobs on ``workers`` processes (``workers == 1``: in this process, in order);
    ``out``: the results folder (training snapshots of resumable methods go under it)."""
    if workers == 1:
        init_worker(threads)
        for job in jobs:
            for outcome in execute_job(job, data_dir, threads, out):
                collect(outcome)
        return
    # spawn, not fork: forking a process that already runs torch's thread pools can deadlock.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=init_pool_worker,
        initargs=(threads, os.getpid()),
    ) as pool:
        pending = {pool.submit(execute_job, job, data_dir, threads, out): job for job in jobs}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    job = pending.pop(future)
                    try:
                        outcomes = future.result()
                    except BrokenProcessPool as exc:
                        # A worker died (killed, out of memory): its cells are recorded as
                        # failed and will be retried by the next run.
                        error = f"worker process died: {exc}"
                        outcomes = [CellOutcome(cell, error=error) for cell in job.cells]
                    for outcome in outcomes:
                        collect(outcome)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def run_ray(
    jobs: list[Job],
    data_dir: str | None,
    workers: int,
    threads: int,
    address: str | None,
    collect: Collect,
    out: str | None = None,
) -> None:
    """Run cells as Ray tasks of ``threads`` CPUs each, on a local instance or a cluster.

    A local instance gets ``workers * threads`` CPUs, so at most ``workers`` cells run at once;
    on a cluster (``address``) Ray places the tasks on the cluster's CPUs.
    """
    try:
        import ray
    except ImportError:
        raise MatchoptError("the ray backend needs Ray: pip install 'matchopt[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers * threads, include_dashboard=False, log_to_driver=False)
    try:
        remote_job = ray.remote(num_cpus=threads, max_retries=0)(_ray_job)
        pending = {remote_job.remote(job, data_dir, threads, out): job for job in jobs}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                job = pending.pop(done[0])
                try:
                    outcomes = ray.get(done[0])
                except ray.exceptions.RayError as exc:
                    error = f"ray task failed: {exc}"
                    outcomes = [CellOutcome(cell, error=error) for cell in job.cells]
                for outcome in outcomes:
                    collect(outcome)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    finally:
        if started_here:
            ray.shutdown()


def _ray_job(
    job: Job, data_dir: str | None, threads: int, out: str | None = None
) -> list[CellOutcome]:
    init_worker(threads)
    # On a cluster the snapshots (and a job's shared ensemble) are on the worker's disk: a
    # retried job resumes only there.
    return execute_job(job, data_dir, threads, out)
