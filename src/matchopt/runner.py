"""One run: task -> method -> designs -> oracle -> normalized scores -> record; and runs that
share their training (a folder of Gaussian ensembles, a batch of seeds), each giving its own
record (:func:`run_batch`, the one way runs execute)."""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from matchopt._version import __version__, source_commit
from matchopt.errors import MatchoptError
from matchopt.evaluation import lab_view, percentile
from matchopt.methods import Method, RunContext, make_method
from matchopt.methods.base import resumed_seconds
from matchopt.methods.training import fit_seeds
from matchopt.records import RunRecord, check_record
from matchopt.runtime import limit_threads, resolve_device
from matchopt.tasks import Task, load_task

N_DESIGNS = 128


@dataclass(frozen=True)
class RunSpec:
    """One run of :func:`run_batch`: a method with its seed, preset and overrides, and the
    context it runs in (:class:`~matchopt.methods.engine.RunContext`: its own snapshot file,
    a folder of shared Gaussian ensembles; None: a plain fit)."""

    method: str
    seed: int
    preset: str = "paper"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    context: RunContext | None = None

    def make(self, progress: bool = False, device: str | None = None) -> Method:
        """The run's method, unfitted (:func:`~matchopt.methods.make_method`)."""
        return make_method(
            self.method,
            self.preset,
            dict(self.overrides),
            seed=self.seed,
            progress=progress,
            device=device,
        )

    def same_method(self, other: RunSpec) -> bool:
        """Whether ``other`` runs this method with the same preset and overrides."""
        same = (self.method, self.preset, dict(self.overrides))
        return same == (other.method, other.preset, dict(other.overrides))


@dataclass(frozen=True)
class SeedBatchPlan:
    """The seeds whose training is one batched loop in :func:`run_batch`
    (:func:`~matchopt.methods.training.fit_seeds`): the first run's method, preset and overrides
    for each of ``seeds``, within ``context`` (its snapshot file is the batch's one; its
    ensemble folder keeps the trained ensembles for the batch's other runs)."""

    seeds: tuple[int, ...]
    context: RunContext = RunContext()


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
    """Fit ``method`` on the task's offline data, propose ``n_designs``, score them: a
    :func:`run_batch` of one run.

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
    spec = RunSpec(method, seed, preset, overrides or {}, context)
    (result,) = run_batch(task, [spec], None, data_dir, n_designs, progress, threads, device)
    if isinstance(result, Exception):
        raise result
    return result


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
    """:func:`run` for several seeds whose training is one batched loop: a :func:`run_batch`
    of the seeds with a :class:`SeedBatchPlan` of them (``context`` is the batch's); raises
    the first failure of a seed."""
    specs = [RunSpec(method, seed, preset, overrides or {}) for seed in seeds]
    batch = SeedBatchPlan(tuple(int(s) for s in seeds), context or RunContext())
    args = (data_dir, n_designs, progress, threads, device)
    results = list(run_batch(task, specs, batch, *args))
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results


def run_batch(
    task: str | Task,
    runs: Sequence[RunSpec],
    batch: SeedBatchPlan | None = None,
    data_dir: str | os.PathLike | None = None,
    n_designs: int = N_DESIGNS,
    progress: bool = False,
    threads: int | None = None,
    device: str | None = None,
) -> Iterator[tuple[RunRecord, np.ndarray] | Exception]:
    """Run ``runs`` on one task, in order, yielding each run's record and designs (as
    :func:`run` describes them) as soon as the run ends, or the exception that ended it (the
    others go on). Every way a run executes goes through here: one run, several sharing a
    folder of Gaussian ensembles (in their contexts), a batch of seeds.

    With ``batch``, the first run's method trains for every seed of the batch at once first
    (:func:`~matchopt.methods.training.fit_seeds`, within the batch's context); the runs of that
    method and one of those seeds then search with the model trained there (each in its own
    context from then on), the others fit on their own. A failure of the batch's training (or
    of loading the task) raises.

    Time fields of the records (:mod:`matchopt.records`): ``fit_seconds`` is the run's own
    training, or for a run trained in the batch, its share of the batch's (the batch's seconds
    over its seeds); either counts the training of earlier sittings when it continued a killed
    one (``extra.resumed.earlier_seconds``). ``extra.cell_seconds`` is the whole run: that
    training, the search and the scoring. With ``batch``, every record's ``extra.seed_batch``
    holds the batch's seeds and training seconds (``fit_seconds``).
    """
    task_obj = _start(task, data_dir, n_designs, device)
    runs = list(runs)
    trained = _Trained.of(task_obj, runs, batch, progress, device, threads)
    for index, spec in enumerate(runs):
        result: tuple[RunRecord, np.ndarray] | Exception
        try:
            with limit_threads(threads):
                if index in trained.solvers:
                    result = trained.run(task_obj, spec, index, n_designs)
                else:
                    result = _run_alone(task_obj, spec, n_designs, progress, device, trained.extra)
        except Exception as exc:  # the run's failure is its outcome; the others go on
            result = exc
        yield result


def _run_alone(
    task_obj: Task,
    spec: RunSpec,
    n_designs: int,
    progress: bool,
    device: str | None,
    extra: dict[str, Any],
) -> tuple[RunRecord, np.ndarray]:
    """A run that fits on its own, in its own context (``extra``: more of its record's
    ``extra``)."""
    started = time.perf_counter()
    solver = spec.make(progress, device)
    if spec.context is not None:
        solver.run = spec.context
    start = time.perf_counter()
    solver.fit(task_obj.offline)
    fit_seconds = time.perf_counter() - start
    # A run resumed from a snapshot counts the training of its earlier sittings too.
    earlier = resumed_seconds(solver)
    extra = {**extra, **({"resumed": {"earlier_seconds": earlier}} if earlier > 0 else {})}
    whole = _Stopwatch(started, earlier)
    return _propose_and_score(
        task_obj, solver, spec, n_designs, fit_seconds + earlier, whole, extra
    )


@dataclass
class _Trained:
    """The runs of :func:`run_batch` trained in its seed batch: their fitted methods by the
    index of their run, and the batch's training seconds (earlier sittings included)."""

    solvers: dict[int, Method] = field(default_factory=dict)
    seconds: float = 0.0
    earlier: float = 0.0
    #: More of every record's ``extra`` (``seed_batch``, with a batch).
    extra: dict[str, Any] = field(default_factory=dict)
    share: float = 0.0

    @classmethod
    def of(
        cls,
        task_obj: Task,
        runs: list[RunSpec],
        batch: SeedBatchPlan | None,
        progress: bool,
        device: str | None,
        threads: int | None,
    ) -> _Trained:
        """Train the batch's seeds (none without ``batch``)."""
        if batch is None or not runs:
            return cls()
        first = runs[0]
        solvers = [replace(first, seed=seed).make(progress, device) for seed in batch.seeds]
        for k, solver in enumerate(solvers):  # the batch's one snapshot file is the first's
            solver.run = batch.context if k == 0 else replace(batch.context, snapshot=None)
        with limit_threads(threads):
            start = time.perf_counter()
            fit_seeds(solvers, task_obj.offline)
            earlier = resumed_seconds(solvers[0])  # the batch's earlier sittings
            seconds = time.perf_counter() - start + earlier
        by_seed = dict(zip(batch.seeds, solvers))
        mine = {
            index: by_seed[spec.seed]
            for index, spec in enumerate(runs)
            if spec.same_method(first) and spec.seed in by_seed
        }
        for index, solver in mine.items():
            if runs[index].context is not None:  # its search runs in its own context
                solver.run = runs[index].context
        extra = {"seed_batch": {"seeds": list(batch.seeds), "fit_seconds": seconds}}
        return cls(mine, seconds, earlier, extra, seconds / len(batch.seeds))

    def run(
        self, task_obj: Task, spec: RunSpec, index: int, n_designs: int
    ) -> tuple[RunRecord, np.ndarray]:
        """The search and scoring of a run trained in the batch."""
        solver = self.solvers.pop(index)
        extra = dict(self.extra)
        if self.earlier > 0:
            extra["resumed"] = {"earlier_seconds": self.earlier}
        whole = _Stopwatch(time.perf_counter(), self.share)
        return _propose_and_score(task_obj, solver, spec, n_designs, self.share, whole, extra)


@dataclass(frozen=True)
class _Stopwatch:
    """Seconds of a whole run: since ``started`` (``time.perf_counter()``), plus ``before``
    (training it counts that ran before: earlier sittings, a share of a batch)."""

    started: float
    before: float = 0.0

    def seconds(self) -> float:
        return time.perf_counter() - self.started + self.before


def _start(
    task: str | Task, data_dir: str | os.PathLike | None, n_designs: int, device: str | None
) -> Task:
    """Checks before a run (or a batch of runs) reads any data, then its task."""
    resolve_device(device)  # an unknown or absent device fails here, before any data is read
    # The commit is read now, as the code is loaded: a checkout may move on while a run trains
    # for hours, and the record names the code that ran (cached for the process).
    source_commit()
    if isinstance(n_designs, bool) or not isinstance(n_designs, (int, np.integer)) or n_designs < 1:
        raise MatchoptError(f"n_designs must be an integer >= 1, got {n_designs!r}")
    return task if isinstance(task, Task) else load_task(task, data_dir)


def _propose_and_score(
    task_obj: Task,
    solver: Method,
    spec: RunSpec,
    n_designs: int,
    fit_seconds: float,
    whole: _Stopwatch,
    extra: dict[str, Any],
) -> tuple[RunRecord, np.ndarray]:
    """A fitted method's designs, scored by the task's oracle, as the run record of ``spec``
    (``fit_seconds``: its training's, earlier sittings included; ``whole`` times the whole run;
    ``extra``: more of the record's ``extra``)."""
    method = spec.method
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
    lab = lab_view(designs, scores, task_obj.offline.x, task_obj.measured(designs))
    extra = {"environment": environment(solver.device_), **_fit_report(solver), "lab": lab, **extra}
    extra["cell_seconds"] = whole.seconds()
    record = RunRecord(
        task=task_obj.name,
        method=method,
        seed=spec.seed,
        preset=spec.preset,
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
