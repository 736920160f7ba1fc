"""Execution backends of the grid runner: a local process pool, or Ray (local or a cluster).

Both run :func:`matchopt.bench.cells.execute_cell` on each cell and hand every outcome to the
driver's ``collect`` callback as soon as it arrives; scheduling is the engine's job, not ours.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from matchopt.bench.cells import Cell, CellOutcome, execute_cell, init_pool_worker, init_worker
from matchopt.errors import MatchoptError

Collect = Callable[[CellOutcome], None]


def run_local(
    cells: list[Cell],
    data_dir: str | None,
    workers: int,
    threads: int,
    collect: Collect,
    out: str | None = None,
) -> None:
    """Run cells on ``workers`` processes (``workers == 1``: in this process, in order);
    ``out``: the results folder (training snapshots of resumable methods go under it)."""
    if workers == 1:
        init_worker(threads)
        for cell in cells:
            collect(execute_cell(cell, data_dir, threads, out))
        return
    # spawn, not fork: forking a process that already runs torch's thread pools can deadlock.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=init_pool_worker,
        initargs=(threads, os.getpid()),
    ) as pool:
        pending = {pool.submit(execute_cell, cell, data_dir, threads, out): cell for cell in cells}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    cell = pending.pop(future)
                    try:
                        outcome = future.result()
                    except BrokenProcessPool as exc:
                        # A worker died (killed, out of memory): the cell is recorded as failed
                        # and will be retried by the next run.
                        outcome = CellOutcome(cell, error=f"worker process died: {exc}")
                    collect(outcome)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def run_ray(
    cells: list[Cell],
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
        remote_cell = ray.remote(num_cpus=threads, max_retries=0)(_ray_cell)
        pending = {remote_cell.remote(cell, data_dir, threads, out): cell for cell in cells}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                cell = pending.pop(done[0])
                try:
                    outcome = ray.get(done[0])
                except ray.exceptions.RayError as exc:
                    outcome = CellOutcome(cell, error=f"ray task failed: {exc}")
                collect(outcome)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    finally:
        if started_here:
            ray.shutdown()


def _ray_cell(
    cell: Cell, data_dir: str | None, threads: int, out: str | None = None
) -> CellOutcome:
    init_worker(threads)
    # On a cluster the snapshots are on the worker's disk: a retried cell resumes only there.
    return execute_cell(cell, data_dir, threads, out)
