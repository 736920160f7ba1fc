"""The engine with a fake method and a fake task (BoTorch's MockModel pattern): the runner, the
bench's grid and the report, in seconds, whatever the real methods cost.

The fake task is a 2-d quadratic with 40 offline rows; the fake method proposes the best offline
rows moved by a fixed step, and counts how often the engine fits it and calls the oracle.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from matchopt.bench import Grid, run_grid
from matchopt.config_fields import count
from matchopt.data import DesignSpace, OfflineData
from matchopt.methods import METHODS, RunContext
from matchopt.methods.base import Method, MethodEntry
from matchopt.methods.training import Resumable
from matchopt.methods.wrappers import check_fitted, fit_all_or_nothing, in_default_threads
from matchopt.report import write_report
from matchopt.runner import run
from matchopt.tasks import TASKS
from matchopt.tasks.base import Task


class FakeTask(Task):
    """-(x1^2 + x2^2) on [-1, 1]^2: 80 draws, the lower half offline."""

    name = "fake-quadratic"
    summary = "fake 2-d quadratic (tests)"
    space = DesignSpace.continuous(2)
    offline_size = 40
    embedded = True
    oracle_calls = 0

    def _load(self):
        x = np.random.default_rng(0).uniform(-1, 1, (80, 2))
        y = self._function(x)
        keep = y <= np.median(y)
        return x[keep], y[keep], y

    @staticmethod
    def _function(x: np.ndarray) -> np.ndarray:
        return -(np.asarray(x, dtype=np.float64) ** 2).sum(axis=1)

    def _score(self, designs: np.ndarray) -> np.ndarray:
        type(self).oracle_calls += 1
        return self._function(designs)


@dataclasses.dataclass(frozen=True)
class FakeConfig:
    step: float = 0.1
    """How far toward the origin the best rows move."""
    repeats: int = count(1)
    """Unused work: a count field, to check configs pass through."""


class FakeMethod(Method):
    """The best offline rows (again from the best when ``n`` exceeds them), moved ``step``
    toward the origin, plus a seeded jitter."""

    config_class = FakeConfig
    presets = {"paper": {}, "quick": {"step": 0.2}}
    fits = 0
    contexts: list[RunContext] = []

    @fit_all_or_nothing
    def fit(self, data: OfflineData) -> FakeMethod:
        type(self).fits += 1
        type(self).contexts.append(self.run)
        self.data_ = data
        return self

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        check_fitted(self)
        order = np.argsort(-self.data_.y)
        best = self.data_.x[order[np.arange(n) % len(order)]]  # the best rows, round after round
        jitter = np.random.default_rng(self.seed).normal(0, 1e-3, best.shape)
        return (best * (1 - self.config_.step) + jitter).astype(np.float32)


class ResumableFake(FakeMethod, Resumable):
    """The fake method, keeping training snapshots (it writes none)."""


@pytest.fixture
def fakes(monkeypatch):
    monkeypatch.setitem(TASKS, FakeTask.name, FakeTask)
    monkeypatch.setitem(METHODS, "fake", MethodEntry(FakeMethod, "fake method (tests)"))
    FakeTask.oracle_calls = FakeMethod.fits = 0
    monkeypatch.setattr(FakeMethod, "contexts", [])
    return FakeTask, FakeMethod


def test_a_run_fits_once_scores_once_and_records_what_it_did(fakes):
    task, method = fakes
    record, designs = run("fake-quadratic", "fake", seed=3, preset="quick", n_designs=16)
    assert method.fits == 1 and task.oracle_calls == 1
    assert designs.shape == (16, 2)
    assert (record.task, record.method, record.seed, record.preset) == (
        "fake-quadratic", "fake", 3, "quick",
    )  # fmt: skip
    assert record.config == {"step": 0.2, "repeats": 1}
    # Moved toward the optimum: every design beats the row it came from.
    assert record.p100 > record.offline_best
    again, same = run("fake-quadratic", "fake", seed=3, preset="quick", n_designs=16)
    np.testing.assert_array_equal(same, designs)  # same seed, same designs
    assert again.p50 == record.p50


def test_a_grid_records_each_cell_and_a_rerun_skips_them(fakes, tmp_path):
    task, method = fakes
    grid = Grid(tasks=["fake-quadratic"], methods=["fake"], seeds=[0, 1, 2], preset="quick")
    summary = run_grid(grid, tmp_path, workers=1, progress=False)
    assert len(summary.finished) == 3 and not summary.failed and method.fits == 3
    for seed in range(3):
        record = json.loads((tmp_path / "fake-quadratic" / "fake" / f"seed{seed}.json").read_text())
        assert record["seed"] == seed and record["method"] == "fake"
    again = run_grid(grid, tmp_path, workers=1, progress=False)
    assert len(again.skipped) == 3 and method.fits == 3  # nothing refitted
    report = write_report(tmp_path, runtime=False)
    assert "fake-quadratic" in report and "fake" in report


def test_a_failing_cell_is_recorded_and_the_grid_goes_on(fakes, tmp_path, monkeypatch):
    task, method = fakes

    def broken(self, n=128):
        raise RuntimeError("the fake search broke")

    grid = Grid(tasks=["fake-quadratic"], methods=["fake"], seeds=[0, 1], preset="quick")
    monkeypatch.setattr(FakeMethod, "propose", broken)
    summary = run_grid(grid, tmp_path, workers=1, progress=False)
    assert len(summary.failed) == 2 and "the fake search broke" in summary.failed[0].error
    assert task.oracle_calls == 0  # the oracle never sees a failed run
    assert all((tmp_path / "fake-quadratic" / "fake" / f"seed{s}.json").exists() is False
               for s in (0, 1))  # fmt: skip


def test_a_run_hands_its_context_to_the_method_and_nothing_else(fakes, tmp_path, monkeypatch):
    task, method = fakes
    run("fake-quadratic", "fake", seed=0, preset="quick", n_designs=4)
    assert method.contexts[-1] == RunContext()  # a plain fit: no snapshots, no shared ensembles
    context = RunContext.of(tmp_path / "snap.pt", tmp_path / "ensembles", [0, 1])
    run("fake-quadratic", "fake", seed=0, preset="quick", n_designs=4, context=context)
    seen = method.contexts[-1]
    assert seen.ensemble_folder == tmp_path / "ensembles" and seen.seed_batch == (0, 1)
    assert seen.snapshot is None  # a method that keeps no snapshots is given no file
    monkeypatch.setitem(METHODS, "fake", MethodEntry(ResumableFake, "resumable fake (tests)"))
    run("fake-quadratic", "fake", seed=0, preset="quick", n_designs=4, context=context)
    assert method.contexts[-1].snapshot.path == tmp_path / "snap.pt"
    # A grid gives each cell its own snapshot file, under the results folder.
    grid = Grid(tasks=["fake-quadratic"], methods=["fake"], seeds=[5], preset="quick")
    run_grid(grid, tmp_path / "grid", workers=1, progress=False)
    snapshot = method.contexts[-1].snapshot
    assert snapshot is not None and (tmp_path / "grid") in snapshot.path.parents
