"""Scoring many designs by simulation, serially or in worker processes: the one pooled rollout
scorer of the Hopper and morphology oracles.

Workers are started with ``spawn`` (forking a process that runs torch's thread pools can
deadlock), so a script that scores with ``workers > 1`` must guard its entry point with
``if __name__ == "__main__":``. Results come back in the order of the jobs, whatever the number
of workers, so a pool gives the serial values.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from tqdm.auto import tqdm

from matchopt.errors import MatchoptError

#: Worker processes of an oracle unless told otherwise: 1 (serial, in this process). Each
#: spawned worker first imports matchopt (torch: about 3 s), and a bench grid may already run
#: cells in parallel, so a pool is opt-in: ``workers=k``, or ``None`` for one per core.
DEFAULT_WORKERS = 1


def resolve_workers(workers: int | None, n_jobs: int) -> int:
    """Processes to use for ``n_jobs`` jobs: ``workers`` (None: one per core), at most n_jobs.

    Raises:
        MatchoptError: ``workers`` is not an integer >= 1 or None.
    """
    if workers is None:
        workers = os.cpu_count() or 1
    if isinstance(workers, bool) or int(workers) != workers or workers < 1:
        raise MatchoptError(f"workers must be an integer >= 1 or None, got {workers}")
    return max(1, min(int(workers), n_jobs))


def open_pool(
    workers: int, initializer: Callable[..., None] | None = None, initargs: tuple = ()
) -> ProcessPoolExecutor:
    """A pool of ``workers`` spawned processes, each running ``initializer(*initargs)`` once."""
    return ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=initializer,
        initargs=initargs,
    )


def pooled_map(
    job: Callable[[Any], float],
    items: Sequence[Any] | Iterable[Any],
    workers: int | None = DEFAULT_WORKERS,
    *,
    pool: ProcessPoolExecutor | None = None,
    initializer: Callable[..., None] | None = None,
    initargs: tuple = (),
    progress: bool = False,
    desc: str = "rollouts",
) -> list[float]:
    """``[job(item) for item in items]``, in a process pool when more than one worker is used.

    Args:
        job: a module-level function (it is pickled by name for the workers).
        items: its arguments, one per job.
        workers: processes (None: one per core); 1 runs the jobs here, in order.
        pool: an open pool to use instead (its workers are already initialized).
        initializer, initargs: run once per worker before its first job (and here, once, when
            the jobs run here), e.g. to hand every worker a policy.
        progress: a progress bar on stderr.
    """
    items = list(items)
    bar = tqdm(total=len(items), desc=desc, disable=not progress, leave=False)
    with bar:
        if pool is None:
            n_workers = resolve_workers(workers, len(items))
            if n_workers <= 1:
                if initializer is not None:
                    initializer(*initargs)
                results = []
                for item in items:
                    results.append(job(item))
                    bar.update()
                return results
            with open_pool(n_workers, initializer, initargs) as own:
                return _map(own, job, items, n_workers, bar)
        return _map(pool, job, items, resolve_workers(workers, len(items)), bar)


def _map(pool: ProcessPoolExecutor, job, items: list, n_workers: int, bar) -> list[float]:
    chunk = max(1, len(items) // (4 * n_workers))
    results = []
    for value in pool.map(job, items, chunksize=chunk):
        results.append(value)
        bar.update()
    return results
