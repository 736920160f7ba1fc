"""One run: task -> method -> designs -> oracle -> normalized scores -> record."""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from matchopt._version import __version__, source_commit
from matchopt.errors import MatchoptError
from matchopt.evaluation import lab_view, percentile
from matchopt.methods import Method, RunContext, make_method
from matchopt.methods.training import fit_seeds
from matchopt.records import RunRecord, check_record
from matchopt.runtime import limit_threads, resolve_device
from matchopt.tasks import Task, load_task

N_DESIGNS = 128


def run(
    task: str | Task,
    method: str = "matchopt",
    seed: int = 0,
    preset: str = "paper",
    overrides: dict[str, Any] | None = None,
    data_dir: str | os.PathLike | None = None,
    n_designs: int = N_DESIGNS,
    progress: bool = False,
    threads: int | None = None,
    device: str | None = None,
    context: RunContext | None = None,
) -> tuple[RunRecord, np.ndarray]:
    """Fit ``method`` on the task's offline data, propose ``n_designs``, score them.

    The oracle is called once, on the designs the method returned. The run uses ``threads``
    compute threads (default :func:`~matchopt.runtime.default_threads`; the record's
    ``extra.environment.torch_threads`` says how many: they change summation order, so the
    same seed gives the same designs with the same threads). ``device`` is the torch device of
    the method (:func:`~matchopt.runtime.resolve_device`; default the CPU); the record says
    which device ran. ``context`` says how the run executes
    (:class:`~matchopt.methods.engine.RunContext`: a snapshot file a killed run continues from,
    which keeps the finished training when ``run`` returns, so remove it once the record is
    stored; a folder of shared Gaussian ensembles, which gives the same designs).

    Returns:
        The run record and the designs (n_designs x shape).
    """
    task_obj = _start(task, data_dir, n_designs, device)
    solver = make_method(method, preset, overrides, seed=seed, progress=progress, device=device)
    if context is not None:
        solver.run = context
    with limit_threads(threads):
        return _run(task_obj, solver, method, seed, preset, n_designs)


def _start(
    task: str | Task, data_dir: str | os.PathLike | None, n_designs: int, device: str | None
) -> Task:
    """Checks before a run (or a batch of seeds) reads any data, then its task."""
    resolve_device(device)  # an unknown or absent device fails here, before any data is read
    # The commit is read now, as the code is loaded: a checkout may move on while a run trains
    # for hours, and the record names the code that ran (cached for the process).
    source_commit()
    if isinstance(n_designs, bool) or not isinstance(n_designs, (int, np.integer)) or n_designs < 1:
        raise MatchoptError(f"n_designs must be an integer >= 1, got {n_designs!r}")
    return task if isinstance(task, Task) else load_task(task, data_dir)


def _run(
    task_obj: Task, solver: Method, method: str, seed: int, preset: str, n_designs: int
) -> tuple[RunRecord, np.ndarray]:
    start = time.perf_counter()
    solver.fit(task_obj.offline)
    fit_seconds = time.perf_counter() - start
    # A run resumed from a snapshot counts the training of its earlier sittings too.
    earlier = resumed_seconds(solver)
    record, designs = _propose_and_score(
        task_obj, solver, method, seed, preset, n_designs, fit_seconds + earlier
    )
    if earlier > 0:
        record.extra["resumed"] = {"earlier_seconds": earlier}
    return record, designs


def resumed_seconds(solver: Method) -> float:
    """Seconds a fitted method trained in earlier sittings: those of the snapshot it continued
    a killed run from (:attr:`~matchopt.methods.engine.RunContext.resumed_seconds`), and those
    of the members of a shared ensemble that an earlier sitting left in the ensemble cache (its
    ``fit_report``'s ``shared_ensemble``). 0 for a fit in one sitting. Run records add them to
    ``fit_seconds``, so that a resumed run reports the time of its whole training."""
    shared = solver.fit_report().get("shared_ensemble") or {}
    return solver.run.resumed_seconds + float(shared.get("earlier_seconds", 0.0))


def run_seeds(
    task: str | Task,
    method: str,
    seeds: Sequence[int],
    preset: str = "paper",
    overrides: dict[str, Any] | None = None,
    data_dir: str | os.PathLike | None = None,
    n_designs: int = N_DESIGNS,
    progress: bool = False,
    threads: int | None = None,
    device: str | None = None,
    context: RunContext | None = None,
) -> list[tuple[RunRecord, np.ndarray]]:
    """:func:`run` for several seeds whose training is one batched loop
    (:func:`~matchopt.methods.training.fit_seeds`; a method that does not batch seeds fits them
    one after the other): one record and design set per seed, as :func:`run` gives them up to
    float round-off. The snapshot file of ``context`` is the batch's one.

    A record's ``fit_seconds`` is its share of the batch's training (the batch's seconds over
    its seeds); ``extra.seed_batch`` holds the seeds trained together and the batch's seconds.
    """
    task_obj = _start(task, data_dir, n_designs, device)
    solvers = [
        make_method(method, preset, overrides, seed=seed, progress=progress, device=device)
        for seed in seeds
    ]
    if context is not None:
        solvers[0].run = context
    with limit_threads(threads):
        start = time.perf_counter()
        fit_seeds(solvers, task_obj.offline)
        earlier = resumed_seconds(solvers[0])  # the batch's earlier sittings
        batch_seconds = time.perf_counter() - start + earlier
        results = []
        for solver in solvers:
            share = batch_seconds / len(solvers)
            record, designs = _propose_and_score(
                task_obj, solver, method, solver.seed, preset, n_designs, share
            )
            record.extra["seed_batch"] = {"seeds": list(seeds), "fit_seconds": batch_seconds}
            if earlier > 0:
                record.extra["resumed"] = {"earlier_seconds": earlier}
            results.append((record, designs))
    return results


def _propose_and_score(
    task_obj: Task,
    solver: Method,
    method: str,
    seed: int,
    preset: str,
    n_designs: int,
    fit_seconds: float,
) -> tuple[RunRecord, np.ndarray]:
    """A fitted method's designs, scored by the task's oracle, as a run record
    (``fit_seconds``: its training's, earlier sittings included)."""
    fitted = time.perf_counter()
    designs = solver.propose(n_designs)
    searched = time.perf_counter()
    designs = task_obj.space.validate(designs, f"designs returned by {method}")
    if len(designs) != n_designs:
        raise MatchoptError(f"{method} returned {len(designs)} designs instead of {n_designs}")

    scores = task_obj.normalize(task_obj.score(designs))
    if not np.isfinite(scores).all():
        # A record must hold finite scores (records.py refuses others when read back).
        bad = int(np.flatnonzero(~np.isfinite(scores))[0])
        raise MatchoptError(
            f"the oracle of {task_obj.name} scored design {bad} of {method} as {scores[bad]}; "
            "no record written"
        )
    extra = {"environment": environment(solver.device_), **_fit_report(solver)}
    extra["lab"] = lab_view(designs, scores, task_obj.offline.x, task_obj.measured(designs))
    record = RunRecord(
        task=task_obj.name,
        method=method,
        seed=seed,
        preset=preset,
        config=_jsonable(dataclasses.asdict(solver.config_)),
        scores=[float(s) for s in scores],
        p100=percentile(scores, 100),
        p50=percentile(scores, 50),
        offline_best=task_obj.offline_best(),
        fit_seconds=fit_seconds,
        search_seconds=searched - fitted,
        version=__version__,
        n_designs=n_designs,
        extra=extra,
    )
    check_record(record)
    return record, designs


def environment(device: Any = "cpu") -> dict[str, Any]:
    """Where a run's wall times were measured (they mean little without it), and the commit of
    the code that ran (:func:`~matchopt._version.source_commit`, when it can be known)."""
    import torch

    info = {
        "commit": source_commit(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "device": str(device),
    }
    if torch.device(device).type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def _fit_report(solver) -> dict[str, Any]:
    report = solver.fit_report()
    return {"fit": report} if report else {}


def _jsonable(config: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}
